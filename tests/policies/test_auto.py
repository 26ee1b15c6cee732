"""The adaptive strategy's controller (policies/auto.py) and the engine's tasks of two kinds:
decisions from measured speeds and noise, the goodput batch, and switches between sized
rounds and asynchronous steps that lose or double no update (seeded interleavings in the
simulator, whose tasks run exactly as the engine dispatches them)."""

from __future__ import annotations

import contextlib
import random

import pytest

from tf_hetero.engine import RoundEngine
from tf_hetero.engine.cycle import RoundCycle
from tf_hetero.policies.auto import AutoConfig, AutoController, optimal_batch
from tf_hetero.policies.noise import GradientNoise, GradientSample

from support.fakes import FakeClock, FakeDispatcher


class _Monitor:
    def __init__(self, unit_times, noise=None):
        self._unit_times, self.noise, self.rounds, self.tasks = unit_times, noise, [], []
        self.events = []

    def unit_times(self, w, last=None):
        return self._unit_times[w][-last:] if last else self._unit_times[w]

    def on_event(self, name, **info):
        self.events.append((name, info))


class _Engine:
    def __init__(self, monitor, n):
        self.monitor, self.live_workers, self.num_workers, self.version = monitor, list(range(n)), n, 0

    @property
    def num_live(self):
        return len(self.live_workers)


def _controller(unit_times, **settings):
    c = AutoController(AutoConfig(**{"window": 4, "async_tuned": False, "start": "async",
                                     "async_below": 1.25, **settings}))
    c.bind(num_workers=len(unit_times), step_units=4, unit_samples=8)
    engine = _Engine(_Monitor(unit_times), len(unit_times))
    c.attach(engine)
    return c, engine


def test_a_persistently_slow_worker_sizes_the_rounds_and_equal_workers_go_back_to_async():
    c, engine = _controller([[0.01] * 4, [0.01] * 4, [0.04] * 4])
    c.after_event()
    assert c.mode == "rounds" and "worker 2 is 4.0x slower" in c.lines[-1]
    engine.monitor._unit_times = [[0.01] * 4] * 3  # the straggler recovered
    engine.version += 3
    c.after_event()
    assert c.mode == "async" and c.lines[-1].startswith("asynchronous steps")
    assert [e[1]["mode"] for e in engine.monitor.events] == ["rounds", "async"]


def test_ticks_with_nothing_new_measured_read_nothing():
    """The engine ticks every few ms for the cut-off: between two measurements the
    controller reads no speed (reading them on each tick cost the chief ~0.1 core)."""
    c, engine = _controller([[0.01] * 4, [0.01] * 4, [0.04] * 4])
    reads = []
    unit_times = engine.monitor.unit_times
    engine.monitor.unit_times = lambda w, last=None: reads.append(w) or unit_times(w, last)
    c.after_event()
    first = len(reads)
    assert first and c.mode == "rounds"
    for _ in range(5):  # ticks
        c.after_event()
    assert len(reads) == first
    engine.version += 1  # an update applied: the next event decides again
    c.after_event()
    assert len(reads) > first


def test_transient_stragglers_do_not_move_the_quartiles_and_the_mode_stays_async():
    rng = random.Random(0)
    times = [[0.05 if rng.random() < 0.1 else 0.01 for _ in range(12)] for _ in range(4)]
    c, _ = _controller(times, window=12)
    c.after_event()
    assert c.mode == "async" and not c.decisions


def test_a_burst_of_stragglers_on_one_worker_is_not_taken_for_a_slow_worker():
    """Half of worker 1's last 12 tasks straggled 4x (the burst `transient`'s seeded draws
    hold, which moved a median 2.7x): its lower quartile is its speed, so async stays; the
    same worker 4x slower in 10 of 12 sizes the rounds."""
    burst = [0.01, 0.04] * 6
    c, _ = _controller([[0.01] * 12, burst, [0.01] * 12], window=12)
    c.after_event()
    assert c.mode == "async" and not c.decisions
    c, _ = _controller([[0.01] * 12, [0.01] * 2 + [0.04] * 10, [0.01] * 12], window=12)
    c.after_event()
    assert c.mode == "rounds" and "worker 1 is 4.0x slower" in c.lines[-1]


def test_after_a_switch_the_next_batch_choice_counts_sized_rounds_only():
    """A switch to rounds starts the count to the next batch choice at the sized rounds seen
    (the list the choice itself counts): counting every training round there (a one-lane
    round is one too) pushed the choice later by as many."""
    import types

    c, engine = _controller([[0.01] * 4, [0.01] * 4, [0.04] * 4])
    one_lane = types.SimpleNamespace(training=True, info={"sizes": {0: 4}})
    sized = types.SimpleNamespace(training=True, info={"sizes": {0: 4, 1: 4, 2: 1}})
    engine.monitor.rounds = [one_lane] * 5 + [sized] * 3
    c.after_event()
    assert c.mode == "rounds" and c._batch_decided_at == 3  # pylint: disable=protected-access


def test_the_mode_waits_until_every_live_worker_is_measured():
    c, _ = _controller([[0.01] * 4, [0.04]])
    c.after_event()
    assert c.mode == "async"


def test_the_goodput_batch_is_the_geometric_mean_of_round_cost_and_noise_scale():
    assert optimal_batch(1000.0, 0.08, 500.0) == pytest.approx(200.0)
    assert optimal_batch(1000.0, 0.0, 500.0) == 0.0


def test_sized_rounds_take_the_goodput_batch_within_the_memory_bound_and_its_gain():
    noise = GradientNoise(beta=0.0)
    noise.add(GradientSample(units=64, lanes=4, mean_sq=1.0 + 2048 / 64 / 8,
                             lane_sq=64 * (1.0 + 2048 / 64 / 8) + 3 * 2048 / 8), unit_samples=8)
    assert noise.noise_scale == pytest.approx(2048.0)
    c, engine = _controller([[0.01] * 4] * 3 + [[0.04] * 4], max_batches=4)
    engine.monitor.noise = noise

    class R:  # sized rounds of 128 samples: 40 ms of compute, 100 ms apart
        def __init__(self, i):
            self.training, self.t_open = True, 0.1 * i
            self.info = {"sizes": {0: 5, 1: 5, 2: 5, 3: 1}, "expected_s": 0.04}

    c.after_event()
    assert c.mode == "rounds"
    engine.monitor.rounds = [R(i) for i in range(12)]
    c.after_event()
    # capacity 3 x 800 + 200 = 2600 samples/s, round cost 60 ms, noise scale 2048:
    # sqrt(2600 x 0.06 x 2048) = 565 samples, above the bound of 4 batches per worker.
    assert c.global_batch == 4 * 4 * 32
    assert c.gain_now == pytest.approx(noise.gain(512, 32))
    assert "global batch 512 samples" in c.lines[-1]


def test_the_staleness_correction_ramps_in_over_one_plus_tau_rounds_and_the_step_is_capped():
    """Started sized on 4 workers (tau = N - 1 = 3): the correction 1 + tau = 4 comes in over
    4 sized rounds, so the first round steps the linear rule's gain (no noise measured: 1)
    times 1.75 and the fifth times 4; with a max_step of 2 the step stops at twice the
    linear rule's (4 batches: 8)."""

    class R:
        training, info = True, {"sizes": {0: 4, 1: 4, 2: 4, 3: 1}}

    def gains(**settings):
        c = AutoController(AutoConfig(window=4, start="rounds", **settings))
        c.bind(num_workers=4, step_units=4, unit_samples=8)
        engine = _Engine(_Monitor([[0.01] * 4] * 3 + [[0.04] * 4]), 4)
        c.attach(engine)
        out = []
        for i in range(6):
            engine.monitor.rounds = [R()] * i
            c.after_event()
            out.append(c.gain_now)
        return c, out

    c, ramped = gains(gain="linear", max_step=100.0)
    assert c.correction == 4.0
    assert ramped == pytest.approx([4 * 1.75, 4 * 2.5, 4 * 3.25, 16, 16, 16])
    _, capped = gains(gain="linear", max_step=2.0)
    assert capped == pytest.approx([7.0, 8.0, 8.0, 8.0, 8.0, 8.0])
    _, off = gains(gain="linear", async_tuned="none")
    assert off == pytest.approx([4.0] * 6)  # no correction: the linear rule alone
    with pytest.raises(ValueError, match=r"AutoConfig\(max_step=0\)"):
        AutoConfig(max_step=0)
    with pytest.raises(ValueError, match=r"AutoConfig\(ramp=-1\)"):
        AutoConfig(ramp=-1)


def test_rounds_whose_gradient_explodes_halve_the_step_for_the_rest_of_the_fit():
    """Started sized on 4 workers at the linear rule's gain capped at twice it (8x): eight
    rounds of steady gradients keep the step; two rounds whose mean gradient is 8x and 40x
    the median before halve it (4x), with a decision line, and restart the momentum;
    ``unstable=0`` keeps 8x."""

    class R:
        training = True

        def __init__(self, norm, step):
            self.info = {"sizes": {0: 4, 1: 4, 2: 4, 3: 1}, "grad_norm": norm, "scale": step}

    def run(**settings):
        c = AutoController(AutoConfig(window=4, start="rounds", gain="linear", ramp=0,
                                      **settings))
        c.bind(num_workers=4, step_units=4, unit_samples=8)
        engine = _Engine(_Monitor([[0.01] * 4] * 3 + [[0.04] * 4]), 4)
        c.attach(engine)
        out, velocity = [], []
        for norm in [1.0] * 8 + [8.0, 40.0] + [3.0] * 4:
            engine.monitor.rounds.append(R(norm, c.gain_now))
            c.after_event()
            out.append(c.gain_now)
            velocity.append(c.velocity())  # as the engine asks at the next round's close
        return c, out, velocity

    c, steps, velocity = run()
    assert steps == [8.0] * 9 + [4.0] * 5
    # the momentum the 8x steps built is restarted, once; restart=False halves it with
    # the step
    assert velocity == [1.0] * 9 + [0.0] + [1.0] * 4
    assert run(restart=False)[2] == [1.0] * 9 + [0.5] + [1.0] * 4
    # a spike's update is clipped: 6x the median mean-gradient norm before the step (3 / 4)
    assert c.max_norm() == pytest.approx(6 * 3.0 / 4.0)
    assert c.decisions[-1][3] == 4.0
    assert c.lines[-1].startswith("step at most 4.00x the one-batch rate from now on: the "
                                  "mean gradient's norm rose to 8x and 40x the median")
    c_off, off, velocity_off = run(unstable=0)
    assert off == [8.0] * 14 and c_off.max_norm() == 0.0 and velocity_off == [1.0] * 14
    with pytest.raises(ValueError, match=r"AutoConfig\(unstable=1\)"):
        AutoConfig(unstable=1)
    with pytest.raises(ValueError, match=r"AutoConfig\(restart=1\)"):
        AutoConfig(restart=1)


def test_bad_settings_are_refused_with_the_value():
    with pytest.raises(ValueError, match=r"AutoConfig\(sized_above=1\.0, async_below=1\.5\)"):
        AutoConfig(sized_above=1.0, async_below=1.5)
    with pytest.raises(ValueError, match=r"AutoConfig\(window=0\)"):
        AutoConfig(window=0)


# -- tasks of two kinds in one engine -----------------------------------------------------

def test_tasks_run_in_the_mode_they_were_made_for_across_a_switch():
    sync = AutoController(AutoConfig(start="async"))
    sync.bind(2, 1, 8)
    d, clock = FakeDispatcher(), FakeClock()
    engine = RoundEngine(2, sync, sync, d, clock=clock, update_scale=sync)
    steps = [engine.submit(i) for i in range(2)]  # made as asynchronous steps
    sync.mode = "rounds"  # the switch: the queued steps stay steps
    rounds = [engine.submit(i) for i in range(2, 6)]
    assert [t.kind for t in steps + rounds] == ["step"] * 2 + ["round"] * 4
    # The steps first, as steps; then a round of the round-kind tasks (queued on each worker
    # behind its step).
    assert [(task.kind, r) for task, _, r in d.dispatched] == [
        ("step", None), ("step", None), ("round", 0), ("round", 0)]
    assert [t.round for t in steps + rounds] == [None, None, 0, 0, None, None]


def _interleaved(seed: int, reintroduce_mismatch: bool = False, ran: list | None = None):
    """A simulated auto fit whose controller flips the mode at random (seeded) events.
    Returns the simulation and ``(task kind, round)`` of every task the engine dispatched."""
    from tf_hetero.sim import costs as costs_mod
    from tf_hetero.sim.run import Simulation
    from tf_hetero.tools.benchconfig import BenchConfig

    cfg = BenchConfig(strategies=("auto",), profile="slow=3:2", tasks=120, steps_per_epoch=40,
                      seed=seed)
    sim = Simulation("auto", cfg, costs_mod.load(), learn=True)
    controller, rng = sim.config.sync, random.Random(seed)
    ran = [] if ran is None else ran
    # A short queue: switches interleave. No cut-off: a round cut at its deadline drops its
    # straggler's task by design, which this test would count as a lost update.
    controller.config = AutoConfig(max_batches=2, cutoff=0)

    def flip(book=None):
        if rng.random() < 0.1:
            controller.mode = "rounds" if controller.mode == "async" else "async"

    controller.after_event = flip
    dispatch = sim.dispatcher.dispatch

    def recorded(task, worker, round_id):
        ran.append((task.kind, round_id))
        return dispatch(task, worker, round_id)

    sim.dispatcher.dispatch = recorded
    originals = {name: getattr(RoundCycle, name)
                 for name in ("_pump", "_rounds_pending", "_pump_async")}
    if reintroduce_mismatch:  # every queued task run in the mode current now, not its own
        def old_pump(self):
            if self.rounds_mode:
                for book in self.books:
                    self._pump_book(book, set())
            else:
                self._pump_async()

        def old_pump_async(self):
            for w in sorted(self._live):
                if self._pending and not self.busy(w):
                    self.dispatch(self._take_pending(), w, None)

        RoundCycle._pump = old_pump
        RoundCycle._rounds_pending = lambda self: (len(self._pending), False)
        RoundCycle._pump_async = old_pump_async
    try:
        sim.fit()
    finally:
        for name, fn in originals.items():
            setattr(RoundCycle, name, fn)
    return sim, ran


@pytest.mark.parametrize("seed", range(4))
def test_random_switches_run_every_task_in_its_own_mode_and_lose_or_double_no_update(seed):
    sim, ran = _interleaved(seed)
    engine, learner, records = sim.engine, sim.learner, sim.monitor.tasks
    assert all((kind == "step") == (r is None) for kind, r in ran)
    steps = [t for t in records if t.round is None]
    rounds = [r for r in engine.rounds if r.applied > 0]
    assert len(steps) + sum(len(r.tasks) + len(r.absorbed) for r in engine.rounds) == 120
    assert all(t.applied for t in records)
    # Each asynchronous step applied itself once, each round once: the learner's updates.
    assert learner.updates == engine.version == len(steps) + len(rounds)
    assert 0 < len(steps) < 120 and rounds  # both modes ran


def test_the_check_fails_when_tasks_are_run_in_the_current_mode_instead_of_their_own():
    """The bug the kinds prevent: a queued closure made for one mode run in the other (an
    accumulating step run asynchronously applies nothing; a step run in a round applies
    itself and leaves the round's lane empty)."""
    from tf_hetero.sim.events import SimulationError

    ran: list = []
    with contextlib.suppress(SimulationError):  # the queue may also stall
        _interleaved(0, reintroduce_mismatch=True, ran=ran)
    assert not all((kind == "step") == (r is None) for kind, r in ran)


def _straggled(cutoff: float):
    """A simulated auto fit (sized rounds throughout) on workers that straggle 5x on one
    task in five; returns the simulation."""
    from tf_hetero.sim import costs as costs_mod
    from tf_hetero.sim.run import Simulation
    from tf_hetero.tools.benchconfig import BenchConfig

    cfg = BenchConfig(strategies=("auto",), profile="straggle=0.2x5;seed=3", tasks=160,
                      steps_per_epoch=40, seed=0)
    sim = Simulation("auto", cfg, costs_mod.load(), learn=True)
    sim.config.sync.config = AutoConfig(async_below=1.0, cutoff=cutoff)  # rounds throughout
    sim.fit()
    return sim


def test_a_round_past_its_cutoff_folds_the_late_share_and_its_worker_sits_out():
    sim = _straggled(cutoff=2.0)
    engine, records = sim.engine, sim.monitor.tasks
    tasks = [t for r in engine.rounds for t in r.tasks]
    late = [t for t in tasks if t.state in ("folded", "dropped")]
    assert late, "no round closed at its cut-off"
    # Every step of fit in exactly one round: run (applied, folded or dropped) or absorbed.
    assert len(tasks) + sum(len(r.absorbed) for r in engine.rounds) == 160
    assert all(t.state in ("done", "folded", "dropped", "absorbed") for t in tasks)
    assert any(r.folds for r in engine.rounds)  # a late share went into a later apply
    # A worker still running its late share got no task in the round that opened next
    # (the late task's round was closed when that round was planned).
    for t in late:
        nxt = engine.rounds[t.round + 1] if t.round + 1 < len(engine.rounds) else None
        if nxt is not None and nxt.t_open < t.t_end:
            assert t.lane_id not in {u.pinned for u in nxt.tasks}
    assert sim.learner.updates == engine.version == len([r for r in engine.rounds
                                                         if r.applied > 0])
    assert not [t for t in records if t.round is None]  # no asynchronous step ran


def test_without_a_cutoff_every_round_waits_for_its_stragglers():
    engine = _straggled(cutoff=0).engine
    assert all(t.state in ("done", "absorbed") for r in engine.rounds for t in r.tasks)
    assert not any(r.folds for r in engine.rounds)


def _round_of(starts, projected=1.0, done=()):
    """A sized round opened at 0 of one task per worker, each projected ``projected`` s,
    started at ``starts[w]`` (None: not started); the workers in ``done`` are in."""
    from tf_hetero.engine.state import Round, Task

    tasks = []
    for w, start in enumerate(starts):
        state = "done" if w in done else ("running" if start is not None else "dispatched")
        tasks.append(Task(id=w, payload=None, round=0, pinned=w, worker=w if start is not None
                          else None, state=state, t_start=start or 0.0, size=4))
    return Round(id=0, tasks=tasks, expected_s=projected,
                 task_s={w: projected for w in range(len(starts))})


def test_a_task_is_cut_off_by_its_own_running_time_not_the_rounds():
    c = AutoController(AutoConfig(cutoff=1.5))
    # Two of four in; the other two started late (the chief's launches take turns on many
    # workers) and have each run 1.0 s of their 1.0 s at 2.0 s: from the round's open that
    # is past 1.5x the makespan, yet neither is late. Counted from the open (the old rule)
    # this round closed and folded two on-time shares.
    rnd = _round_of([0.0, 0.0, 1.0, 1.0], done=(0, 1))
    assert not c.should_close(rnd, now=2.0)
    assert c.should_close(rnd, now=2.6)  # both have now run 1.6x their projected time
    # A task not started yet is never late, and a round with less than half its units in
    # waits whatever its tasks' times.
    assert not c.should_close(_round_of([0.0, 0.0, 0.0, None], done=(0, 1)), now=9.0)
    assert not c.should_close(_round_of([0.0, 0.0, 0.0, 0.0], done=(0,)), now=9.0)
    assert c.should_close(_round_of([0.0, 0.0, 0.0, 0.0], done=(0, 1)), now=1.6)
    # cutoff=0: a round waits for every task.
    assert not AutoController(AutoConfig(cutoff=0)).should_close(
        _round_of([0.0, 0.0, 0.0, 0.0], done=(0, 1, 2)), now=99.0)
