"""The live rebalancing controller (pure: no TensorFlow), on synthetic round times."""

from __future__ import annotations


import pytest

from tf_hetero.policies import rebalance
from tf_hetero.policies.rebalance import Move, RebalanceConfig, RebalanceController

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)


def _controller(**options) -> RebalanceController:
    return RebalanceController(RebalanceConfig(**options))


def _units():
    return {"big": (0, 600), "mid": (0, 300), "small": (1, 100)}


def test_a_faster_move_is_kept_a_slower_one_undone_and_not_retried():
    c = _controller(window=4, explore=0.0, skip_first=0, retry_after=2)
    c.bind(2)
    units = _units()
    assert c.decide(units, [1.0] * 4) == [Move("mid", 0, 1)]
    units["mid"] = (1, 300)
    # 10% faster: kept; the estimate (600 vs 400) has nothing better to offer.
    assert c.decide(units, [0.9] * 4) == []
    assert (c.kept, c.undone, c.baseline) == (1, 0, 0.9)
    # Conditions change (PS 1 measured 4x slower): move "small" back to PS 0? Greedy says so.
    moves = c.decide(units, [0.9] * 4, busy_s=[1.0, 1.6], served_bytes=[600, 400 / 4 * 1.6])
    assert moves and moves[0].dst == 0
    units[moves[0].unit] = (0, units[moves[0].unit][1])
    # The trial is slower than the baseline: undone, and the same move is tabu for a while.
    undo = c.decide(units, [0.95] * 4, busy_s=[1.0, 1.6], served_bytes=[600, 160])
    assert undo[0] == moves[0].reverse() and c.undone == 1
    assert all(m != moves[0] for m in undo[1:])


def test_an_even_placement_stays_put_and_exploration_is_seeded():
    c = _controller(window=2, explore=0.0)
    c.bind(2)
    assert c.decide({"a": (0, 100), "b": (1, 100)}, [0.5, 0.5]) == []
    a = _controller(explore=1.0, seed=3)
    b = _controller(explore=1.0, seed=3)
    a.bind(3)
    b.bind(3)
    units = {"a": (0, 100), "b": (1, 100), "c": (2, 100)}
    assert a.propose(units, (1, 1, 1)) == b.propose(units, (1, 1, 1)) is not None


def test_measured_rates_send_load_off_the_slow_ps():
    c = _controller(window=2, explore=0.0)
    c.bind(2)
    units = {"a": (0, 100), "b": (1, 100), "c": (1, 100)}
    # Equal bytes served, PS 1 busy 3x longer: it is 3x slower, so it should hold less.
    moves = c.decide(units, [0.5, 0.5], busy_s=[1.0, 3.0], served_bytes=[1000, 1000])
    assert [(m.src, m.dst) for m in moves] == [(1, 0)]


def test_bad_options_are_refused_with_the_fix():
    import pytest

    with pytest.raises(ValueError, match="window"):
        RebalanceConfig(window=0)
    with pytest.raises(ValueError, match="Fix: use True, False"):
        rebalance.make(3)


class _Coordinator:
    """What the rebalancer reads of a coordinator, around a real (pure) round engine."""

    def __init__(self, engine, monitor):
        from types import SimpleNamespace

        self.engine, self.monitor = engine, monitor
        self.strategy = SimpleNamespace(extended=SimpleNamespace(_num_ps=2, placement=None))
        self.tracer = SimpleNamespace(accumulators=[], entries={"step": "traced"},
                                      entry=lambda fn, args, kwargs: "retraced")
        self.dispatcher = SimpleNamespace(forget_functions=lambda: ({}, {}))
        self.closures = SimpleNamespace(clear=lambda: None)  # copies of closures (none here)
        self.kept: list = []

    def forget_traces(self):  # HeteroCoordinator.forget_traces, on these stand-ins
        self.kept.append(dict(self.tracer.entries))
        self.tracer.entries.clear()
        return []


def _bsp_engine(workers=2):
    from support.fakes import FakeDispatcher

    from tf_hetero.engine import RoundEngine
    from tf_hetero.policies import AllTasks, OnePerWorker
    from tf_hetero.telemetry import Monitor

    monitor = Monitor(workers)
    dispatcher = FakeDispatcher()
    return RoundEngine(workers, AllTasks(), OnePerWorker(), dispatcher, monitor=monitor), \
        dispatcher, monitor


def _run_rounds_in_background(engine, dispatcher, rounds):
    """Plays the TF side in a thread: runs the dispatched tasks and applies the rounds."""
    import threading
    import time

    def play():
        done = 0
        while done < rounds:
            for task, worker, round_id in list(dispatcher.dispatched):
                if task.state == "dispatched":
                    engine.task_started(task, worker)
                    engine.task_finished(task, worker)
            for round_id, _ in list(dispatcher.applies[done:]):
                time.sleep(0.05)  # the apply takes a while: the boundary must wait for it
                engine.apply_finished(round_id, 2)
                done += 1
            time.sleep(0.01)

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


def test_a_boundary_waits_for_the_rounds_in_flight_and_never_forces_a_partial_round():
    from tf_hetero.strategies.runtime.rebalance import Rebalancer

    engine, dispatcher, monitor = _bsp_engine()
    seen = []

    class Recording(RebalanceController):
        def decide(self, units, round_times, **measured):
            seen.append(list(round_times))
            return [Move("x", 0, 1)]

    rebalancer = Rebalancer(_Coordinator(engine, monitor),
                            Recording(RebalanceConfig(window=1, skip_first=0)))
    rebalancer.move = lambda variable, dst, optimizers=(): None  # no variable here: the move itself is TF's
    rebalancer.units = lambda: {"x": (0, 8, None)}
    # One task pending of a round of two: not a boundary, and no partial round is forced.
    engine.submit("t0")
    assert rebalancer.at_boundary(timeout=5) is False
    assert dispatcher.dispatched == [] and not engine._flushing  # pylint: disable=protected-access
    # The second task opens the round; the next schedule call waits for its apply.
    engine.submit("t1")
    _run_rounds_in_background(engine, dispatcher, 1)
    rebalancer.tasks = 2
    assert rebalancer.before_task("fn", (), {}, "entry") == "retraced"
    assert engine.idle() and len(dispatcher.applies) == 1
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0] > 0  # the round's time
    assert rebalancer.moves and rebalancer.moves[0][1:4] == ("x", 0, 1)
    # The functions traced before the move are dropped (and kept alive).
    coordinator = rebalancer.coordinator
    assert coordinator.tracer.entries == {} and coordinator.kept == [{"step": "traced"}]


@pytest.mark.parametrize("first_window, decided_at", [(1, [2, 4, 10, 16]), (None, [6, 12])])
def test_the_first_two_decisions_come_after_first_window_rounds_then_every_window(
        first_window, decided_at):
    from tf_hetero.strategies.runtime.rebalance import Rebalancer

    engine, _, monitor = _bsp_engine(workers=2)
    controller = _controller(window=3, first_window=first_window, skip_first=0)
    rebalancer = Rebalancer(_Coordinator(engine, monitor), controller)
    rebalancer.at_boundary = lambda timeout=0: True  # every task is a boundary here
    decided = []

    def decide():
        decided.append(rebalancer.tasks - 1)  # the index of the task being scheduled
        controller.decisions += 1
        return False

    rebalancer.decide = decide
    for _ in range(18):
        rebalancer.before_task("fn", (), {}, "entry")
    # 2 workers: rounds of 2 tasks. first_window 1: decisions after rounds 1 and 2, then
    # every 3 rounds; without it every 3 rounds from the start.
    assert decided == decided_at


def test_greedy_moves_go_together_and_are_undone_together():
    """Two heavy units on a 3x slower PS move in one decision (max_moves 4); one move per
    decision with max_moves=1. A slower window undoes the whole batch, last move first, and
    makes every one of its moves tabu."""
    units = {"k0": (1, 64000), "k1": (1, 64000), "b": (0, 800)}
    one = _controller(window=2, explore=0.0, rates=(1.0, 1 / 3), max_moves=1)
    one.bind(2)
    assert one.decide(units, [0.5, 0.5]) == [Move("k0", 1, 0)]
    c = _controller(window=2, explore=0.0, rates=(1.0, 1 / 3), retry_after=5)
    c.bind(2)
    batch = c.decide(units, [0.5, 0.5])
    assert [m.unit for m in batch[:2]] == ["k0", "k1"] and all(m.dst == 0 for m in batch[:2])
    moved = dict(units, **{m.unit: (m.dst, units[m.unit][1]) for m in batch})
    undo = c.decide(moved, [0.6, 0.6])
    assert undo[:len(batch)] == [m.reverse() for m in reversed(batch)]
    assert c.undone == 1 and c.kept == 0
    # What it proposes next, in the same decision, avoids the undone (tabu) moves.
    assert all((m.unit, m.dst) not in {(b.unit, b.dst) for b in batch}
               for m in undo[len(batch):])
    with pytest.raises(ValueError, match="max_moves=0"):
        RebalanceConfig(max_moves=0)


def test_scaling_moves_everything_off_leaving_ps_and_proposes_only_active_ones():
    """scale(): units on a PS leaving the set go (largest first, to the least loaded active
    PS); while a PS stands by nothing is proposed onto it; scaling out moves load onto the
    new PS at once; a trial in progress is dropped and the next window measures afresh."""
    c = _controller(window=2, explore=1.0, rates=(1.0, 1.0, 1.0))  # always explore
    c.bind(3)
    units = {"k0": (0, 6000), "k1": (1, 6000), "k2": (2, 3000), "b": (1, 100)}
    moves = c.scale(units, [0])
    assert [m.unit for m in moves[:3]] == ["k1", "k2", "b"] and all(m.dst == 0 for m in moves)
    assert c.active == (0,) and c.scalings[-1]["active"] == [0]
    packed = {name: (0, load) for name, (_, load) in units.items()}
    for _ in range(20):  # exploration included: nothing ever goes to a standby PS
        assert c.decide(packed, [0.5, 0.5]) == [] and c.trial == []
    out = c.scale(packed, [0, 2])
    assert out and all(m.src == 0 and m.dst == 2 for m in out)
    assert c.baseline is None and c.trial == []
    with pytest.raises(ValueError, match=r"scale_ps\(\[\]\).*Fix"):
        c.scale(packed, [])


def test_rates_fitted_with_a_per_request_cost_send_the_second_kernel_off_the_slow_ps():
    """Measured on the emulated PS tasks: ~9 ms per request beside the bytes' time. With
    request counts the controller fits that cost and sees PS 1 as 3x slower after two
    windows, so the second heavy kernel leaves it; from bytes / busy alone PS 1 looks only
    ~2x slower and the small output kernel is moved instead."""
    def window(b0, b1):  # 64 requests per PS; PS 0 at 0.25 us per byte, PS 1 at 0.75
        return {"requests": [64, 64], "served_bytes": [b0, b1],
                "busy_s": [64 * 0.009 + b0 * 0.25e-6, 64 * 0.009 + b1 * 0.75e-6]}

    def second_decision(with_requests):
        c = _controller(window=2, explore=0.0)
        c.bind(2)
        units = {"k0": (1, 64000), "k1": (1, 64000), "out": (1, 10000), "b": (0, 800)}
        w1, w2 = window(50_000, 4_300_000), window(2_150_000, 2_200_000)
        if not with_requests:  # (bytes / busy of the first window would even refuse k0)
            w1 = {}
            del w2["requests"]
        first = c.decide(units, [0.5, 0.5], **w1)
        assert [m.unit for m in first] == ["k0"]  # rates not known yet: equal
        units["k0"] = (0, 64000)
        second = c.decide(units, [0.4, 0.4], **w2)
        if with_requests:  # settled: windows on one placement do not refit, nothing moves
            for m in second:
                units[m.unit] = (m.dst, units[m.unit][1])
            settled = window(4_200_000, 200_000)
            for _ in range(6):  # the informative windows age out of the last 4
                assert c.decide(units, [0.25, 0.25], **settled) == []
        return [m.unit for m in second]

    assert "k1" in second_decision(with_requests=True)
    assert "k1" not in second_decision(with_requests=False)
    assert rebalance.fit_rates([], 2) is None


def _gated(payback_rounds, explore=0.0):
    c = _controller(window=3, explore=explore, payback_rounds=payback_rounds, seed=1)
    c.bind(2)
    return c


def test_a_move_that_cannot_pay_back_its_pause_is_withheld():
    """The first window's first round is 1.2 s longer (the pause a move costs) and the loaded
    PS is busy 10 ms of each 200 ms round: halving its load saves ~5 ms a round, 0.25 s in 50
    rounds, so nothing moves. Without the check (payback_rounds=None) the same window moves a
    kernel; with the PS busy most of each round the check lets it through."""
    units = {"k0": (0, 64000), "k1": (0, 64000), "b": (1, 800)}
    rounds, idle, busy = [1.4, 0.2, 0.2], [0.03, 0.001], [0.5, 0.001]
    c = _gated(50)
    assert c.decide(units, rounds, busy_s=idle) == [] and c.withheld == 1
    assert c.history[-1]["withheld"] and c.pause_s == pytest.approx(1.2)
    assert c.summary()["rebalance_withheld"] == 1
    assert _gated(None).decide(units, rounds, busy_s=idle) == [Move("k0", 0, 1)]
    assert _gated(50).decide(units, rounds, busy_s=busy) == [Move("k0", 0, 1)]


def test_the_pause_is_measured_after_each_move_with_the_reported_retrace():
    c = _gated(50)
    units = {"k0": (0, 64000), "k1": (0, 64000), "b": (1, 800)}
    (move,) = c.decide(units, [1.4, 0.2, 0.2], busy_s=[0.5, 0.001])
    units["k0"] = (1, 64000)
    # The first round after the move: 0.9 s over the window's others, plus 0.6 s re-tracing.
    c.decide(units, [1.0, 0.1, 0.1], busy_s=[0.1, 0.1], retrace_s=0.6)
    assert c.pause_s == pytest.approx(1.5) and c.history[-1]["decision"] == "keep"
    # No move at that decision: the next window's first round is not a pause.
    c.decide(units, [0.5, 0.1, 0.1], busy_s=[0.1, 0.1])
    assert c.pause_s == pytest.approx(1.5)


def test_explorations_spend_at_most_their_budget_of_the_training_time():
    """explore=1.0 would explore at every decision; with a measured pause of 1 s and a 5%
    budget, each exploration (its move and the likely undo: 2 s) waits for 40 s of rounds."""
    units = {"a": (0, 100), "b": (1, 100)}
    c = _controller(window=5, explore=1.0, seed=0)
    c.bind(2)
    explored_at, elapsed, moved = [], 0.0, True  # the fit's first round pays one too
    for _ in range(60):
        first = 2.0 if moved else 1.0  # a move's pause: 1 s in the next window's first round
        moves = c.decide(units, [first] + [1.0] * 4)
        elapsed += first + 4.0
        moved = bool(moves)
        for m in moves:
            units[m.unit] = (m.dst, units[m.unit][1])
        if c.trial:
            explored_at.append(elapsed)
    assert c.pause_s == pytest.approx(1.0)
    # Each exploration is charged 2 s, 5% of the time: none before 40 s, at most 5% overall.
    assert explored_at and explored_at[0] >= 40
    assert len(explored_at) * 2.0 <= 0.05 * elapsed
    unlimited = _controller(window=5, explore=1.0, seed=0, explore_budget=1.0)
    unlimited.bind(2)
    assert unlimited.decide({"a": (0, 100), "b": (1, 100)}, [2.0] + [1.0] * 4)  # at once


def test_a_greedy_trial_is_undone_only_if_slower_an_exploration_must_gain():
    """A greedy trial 3% faster than its baseline (less than min_gain) is kept: it was
    predicted to pay back its pause, and undoing it is another pause; the same window after
    an exploration undoes it."""
    units = {"big": (0, 600), "mid": (0, 300), "small": (1, 100)}
    greedy = _controller(window=2, explore=0.0, skip_first=0)
    greedy.bind(2)
    (move,) = greedy.decide(units, [1.0, 1.0])
    units["mid"] = (1, 300)
    assert greedy.decide(units, [0.97, 0.97]) == [] and greedy.kept == 1
    slower = _controller(window=2, explore=0.0, skip_first=0)
    slower.bind(2)
    slower.decide(dict(units, mid=(0, 300)), [1.0, 1.0])
    assert slower.decide(units, [1.01, 1.01])[0] == move.reverse() and slower.undone == 1
    explorer = _controller(window=2, explore=1.0, skip_first=0, seed=0)
    explorer.bind(2)
    even = {"a": (0, 100), "b": (1, 100)}
    (tried,) = explorer.decide(even, [1.0, 1.0])
    even[tried.unit] = (tried.dst, 100)
    assert explorer.decide(even, [0.97, 0.97])[0] == tried.reverse() and explorer.undone == 1


# ------------------------------------------------------------------ decision 0 (probe)
_PROBED = [(0.25e-6, 1e-3), (0.75e-6, 1e-3)]  # seconds per byte, per request: PS 1 3x slow


def test_decision_0_moves_on_the_probed_rates_which_later_decisions_keep_using():
    """Before the first round the probed service moves both kernels off the slow PS at once.
    The first window then measures the baseline (decision 0 is not judged, nothing undone),
    and, with one window that cannot separate per-request from per-byte cost, the next
    proposal is made on the probed rates: none. Without them (equal rates) the controller
    would send a kernel back to the slow PS to even the bytes."""
    c = _controller(window=2, explore=0.0)
    c.bind(2)
    units = {"k0": (1, 64000), "k1": (1, 64000), "b": (0, 800)}
    moves = c.initial(units, _PROBED, steps_per_round=4, pause_s=0.5)
    assert [(m.unit, m.src, m.dst) for m in moves[:2]] == [("k0", 1, 0), ("k1", 1, 0)]
    for m in moves:
        units[m.unit] = (m.dst, units[m.unit][1])
    assert c.rates == (1.0, pytest.approx(1 / 3))
    assert c.initial_decision["moves"] == [tuple(m.__dict__.values()) for m in moves]
    window = dict(busy_s=[0.30, 0.02], served_bytes=[1_024_000, 6_400], requests=[16, 16])
    assert c.decide(units, [0.2, 0.2], **window) == []
    assert (c.history[-1]["decision"], c.undone, c.summary()["rebalance_initial_moves"]) == (
        "measure", 0, 3)
    equal = _controller(window=2, explore=0.0)
    equal.bind(2)
    assert equal.decide(units, [0.2, 0.2], **window) != []  # equal rates: evens the bytes


def test_decision_0_says_how_far_whole_variables_are_from_an_even_spread():
    """Two 64 KB kernels, PS 1 3x slower: decision 0 puts both on PS 0, which then serves
    1.33x an even share (no placement of two whole kernels does better), and names the
    largest unit. The same kernels in 8 shards each spread to within 5%."""
    c = RebalanceController()
    c.bind(2)
    c.initial({"k0": (1, 64000), "k1": (1, 64000), "b": (0, 800)}, _PROBED, 4)
    assert c.initial_decision["gap"] == pytest.approx(128000 / (128800 * 3 / 4))
    assert c.initial_decision["largest"] == "k0"
    shards = {f"k{k}/part_{i}": (1, 8000) for k in range(2) for i in range(8)}
    c.initial({**shards, "b": (0, 800)}, _PROBED, 4)
    assert c.initial_decision["gap"] <= 1.05


def test_decision_0_is_withheld_when_its_saving_does_not_pay_the_retrace():
    """The kernel on the fast PS: the greedy rule would still move a bias to the slow PS
    (~1 ms a round saved), the re-trace costs 0.5 s; nothing moves. Without the check (or
    with the kernel on the slow PS) it moves."""
    c = RebalanceController()
    c.bind(2)
    units = {"k": (0, 64000), "b0": (0, 800), "b1": (1, 800)}
    assert c.initial(units, _PROBED, 4, pause_s=0.5) == []
    assert c.initial_decision["withheld"] and c.initial_decision["saving_s"] < 0.01
    unchecked = _controller(payback_rounds=None)
    unchecked.bind(2)
    assert unchecked.initial(units, _PROBED, 4, pause_s=0.5) == [Move("b0", 0, 1)]
    units = {"k": (1, 64000), "b0": (0, 800), "b1": (1, 800)}
    assert c.initial(units, _PROBED, 4, pause_s=0.5) != []


def test_an_unusable_probe_moves_nothing_and_keeps_the_rates():
    c = _controller(rates=(1.0, 0.5))
    c.bind(2)
    units = {"k0": (1, 64000), "b": (0, 800)}
    for probed in ([None, (0.75e-6, 1e-3)], [(0.0, 1e-3), (0.75e-6, 1e-3)], [_PROBED[0]]):
        assert c.initial(units, probed, 4, pause_s=0.5) == []
        assert c.initial_decision["unusable"] and c.rates == (1.0, 0.5)


def test_quiet_decisions_grow_the_window_and_a_move_resets_it():
    """Every decision waits for the rounds in flight; where nothing moves they come at half
    the pace each time, up to max_window. A move brings the window back, so its trial is
    judged after ``window`` rounds; ``max_window=None`` keeps every window the same."""
    c = _controller(window=4, explore=0.0, max_window=16)
    c.bind(2)
    even = {"a": (0, 100), "b": (1, 100)}
    windows = []
    for _ in range(5):
        assert c.decide(even, [0.2] * 4) == []
        windows.append(c.next_window())
    assert windows == [4, 16, 16, 16, 16]
    moves = c.decide({"a": (0, 300), "b": (0, 100), "c": (1, 100)}, [0.2] * 4)
    assert moves and c.next_window() == 4
    fixed = _controller(window=4, explore=0.0, max_window=None)
    fixed.bind(2)
    for _ in range(5):
        fixed.decide(even, [0.2] * 4)
        assert fixed.next_window() == 4
    assert RebalanceConfig(window=1000).window_cap == 1000  # the cap is never below
