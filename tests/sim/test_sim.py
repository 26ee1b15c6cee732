"""The simulator (tf_hetero.sim): the real engine on virtual time, its cost model, its
calibration, its statistical model, and its validation against measured runs. No cluster,
no TensorFlow."""

from __future__ import annotations

import dataclasses
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from tf_hetero.emulation.profile import Profile
from tf_hetero.engine.cycle import RoundCycle
from tf_hetero.sim import calibrate, costs as costs_module, validate
from tf_hetero.sim.costs import CostModel, DeviceTimes
from tf_hetero.sim.learner import Learner
from tf_hetero.sim.run import Simulation, simulate_run
from tf_hetero.strategies import registry

MEASURED = {os.path.splitext(os.path.basename(p))[0]: p for p in validate.measured_files()}


def small_cfg(**kw):
    fields = dict(workers=4, ps=2, profile="slow=3:4", batch_size=32, tasks=40,
                  steps_per_epoch=20, steps_per_execution=1, base_lr=0.02, momentum=0.9,
                  target_accuracy=0.9, eval_interval_s=0.5, seed=0, warmup_updates=0,
                  dataset="digits")
    fields.update(kw)
    return SimpleNamespace(**fields)


# ------------------------------------------------------------------ validation
@pytest.fixture(scope="module")
def shipped():
    return costs_module.load()


@pytest.fixture(scope="module")
def compared(shipped):
    return {name: validate.compare(path, shipped) for name, path in MEASURED.items()}


def test_measured_runs_cover_three_scenarios():
    assert {"one_slow", "classes", "midrun"} <= set(MEASURED)


#: Cells the simulator misses, with the measured numbers (strict: a cell that comes within
#: tolerance must be taken off this list). docs/SIMULATOR.md, "Validation".
_MIDRUN_SLOW = ("midrun (four equal workers for ~all of a 400-task run): the simulator is "
                "slow on every row there (pss -11%); the applies measured on midrun took "
                "19-26 ms, on one_slow (fitted) 22-32, the same code on another run")
_ONE_SLOW_FAST = ("one_slow's fitted apply (19.3 ms without the first one) is the median "
                  "over its rows; these rows' own measured rounds are slower")
KNOWN_MISSES: dict = {
    ("hpspipe", "one_slow"): "measured 413 samples/s, simulated 498 (+20.6%): the measured "
                             "run diverged and stopped after 51 of 100 rounds (first rounds "
                             "weigh twice)",
    ("epspslack", "one_slow"): f"measured 500, simulated 594 (+18.8%): {_ONE_SLOW_FAST}",
    ("hpsfp", "one_slow"): f"measured 449, simulated 521 (+16.1%): {_ONE_SLOW_FAST}",
    ("groupedsized", "one_slow"): f"measured 462, simulated 539 (+16.8%): {_ONE_SLOW_FAST}",
    ("ssp", "midrun"): f"measured 782, simulated 659 (-15.7%): {_MIDRUN_SLOW}",
    ("grouped", "midrun"): f"measured 788, simulated 649 (-17.7%): {_MIDRUN_SLOW}",
}

#: Scenarios whose ranking the simulator gets wrong, and why (strict, as KNOWN_MISSES).
KNOWN_MISORDERS: dict = {
    "one_slow": "backup, casp and epsp measured >15% faster than hpsfp / hpspipe / "
                "groupedsized; simulated level or the other way (those three are simulated "
                "16-21% fast)",
    "classes": "caspsized and groupedsized measured >15% faster than hps / auto, casp than "
               "hpspipe; simulated level or the other way",
    "midrun": "grouped and groupedsized measured >15% faster than epspslack; simulated "
              f"slower ({_MIDRUN_SLOW})",
}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["one_slow", "classes", "midrun"])
@pytest.mark.parametrize("strategy", registry.names())
def test_simulated_samples_per_sec_within_tolerance_of_measured(compared, scenario, strategy,
                                                                 request):
    if (strategy, scenario) in KNOWN_MISSES:
        request.applymarker(pytest.mark.xfail(strict=True,
                                              reason=KNOWN_MISSES[(strategy, scenario)]))
    row = next((r for r in compared[scenario] if r[0] == strategy), None)
    if row is None:
        pytest.skip(f"{strategy}: registered after the measured runs; no measured row")
    _, measured, simulated = row
    assert abs(simulated / measured - 1) <= validate.TOLERANCE, (strategy, measured, simulated)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["one_slow", "classes", "midrun"])
def test_simulation_ranks_strategies_as_measured(compared, scenario, request):
    if scenario in KNOWN_MISORDERS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_MISORDERS[scenario]))
    assert validate.misordered(compared[scenario]) == []


def test_the_buffer_push_spread_slows_only_the_buffered_rounds(shipped):
    # A control for local_push_jitter_s: a buffered round's barrier waits for the slowest of
    # its workers' pushes, so their spread slows H-PS's buffer path (hpsfp) and nothing else.
    # (On the digits runs of 2026-11-27 it was what ranked grouped 17% above hpsfp on
    # `classes`; on the current runs the fitted spread, 9.6 ms, moves hpsfp by ~1%.)
    with open(MEASURED["classes"]) as f:
        bench = json.load(f)

    def simulated(name, costs):
        runs = [simulate_run(name, SimpleNamespace(**{**bench["config"], "seed": s}), costs)
                for s in range(validate.SEEDS)]
        return sorted(r["samples_per_sec"] for r in runs)[validate.SEEDS // 2]

    assert shipped.local_push_jitter_s > 0
    off = dataclasses.replace(shipped, local_push_jitter_s=0.0)
    wide = dataclasses.replace(shipped, local_push_jitter_s=0.030)
    assert simulated("hpsfp", wide) < 0.95 * simulated("hpsfp", off)
    assert simulated("hpsfp", shipped) < simulated("hpsfp", off)
    assert simulated("hps", wide) == simulated("hps", off)


def test_the_buffer_push_spread_is_fitted_beyond_the_alike_rows_spread():
    # hpsfp's steps vary like hps's plus a normal push of 10 ms: the fit finds ~10 ms.
    rng = np.random.default_rng(0)
    cfg = {"workers": 4, "profile": "base_ms=100", "batch_size": 32}

    def row(name, push_sd):
        timeline, start = [], 0.0
        for _ in range(100):  # rounds: four steps, then a 10 ms pause
            ends = []
            for w in range(4):
                d = 0.12 + rng.normal(0, 0.004) + (rng.normal(0, push_sd) if push_sd else 0)
                timeline.append([w, start, start + d, True])
                ends.append(start + d)
            start = max(ends) + 0.01
        return {"strategy": name, "timeline": timeline, "samples_per_worker": [3200] * 4,
                "tasks_per_worker": [100] * 4, "round_breakdown_ms": {"dispatch": 2,
                                                                       "apply": 10},
                "setup_s": 1.0, "gradient_bytes_per_sample": 10.0}

    rows = [row("pss", 0), row("bsp", 0), row("hps", 0), row("hpsfp", 0.010)]
    fitted = calibrate.fit({"config": cfg, "results": rows})
    assert fitted.local_push_jitter_s == pytest.approx(0.010, rel=0.2)
    alone = calibrate.fit({"config": cfg, "results": rows[:3] + [row("hpsint", 0)]})
    assert alone.local_push_jitter_s < 0.004  # sampling noise of two robust spreads


@pytest.mark.slow
def test_validation_fails_with_the_cost_model_switched_off():
    # A control: with no cost but the profile's device time, the simulator must miss.
    off = CostModel(**{f.name: 0.0 for f in dataclasses.fields(CostModel)
                       if f.name not in ("source", "param_bytes", "wire_factor",
                                         "jitter_quantiles_s")}, jitter_quantiles_s=(0.0, 0.0))
    rows = validate.compare(MEASURED["one_slow"], off)
    misses = [s for s, m, sim in rows if abs(sim / m - 1) > validate.TOLERANCE]
    assert len(misses) >= len(rows) // 2, rows


def test_shipped_calibration_is_the_fit_of_the_stored_measured_run(shipped):
    fitted = calibrate.fit_file(MEASURED["one_slow"])
    for f in dataclasses.fields(CostModel):
        if f.name != "source":
            assert getattr(fitted, f.name) == pytest.approx(getattr(shipped, f.name)), f.name


def test_calibration_refuses_a_file_that_is_no_bench_json(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"rows": []}')
    with pytest.raises(ValueError, match=r"is not a bench JSON .* Fix: give the --json file"):
        calibrate.fit_file(str(bad))
    with pytest.raises(ValueError, match=r"calibration file .* does not exist"):
        costs_module.load(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match=r"cost model keys \['speed'\] are unknown"):
        CostModel.from_dict({"speed": 1})


# ------------------------------------------------------------------ the model
@pytest.mark.parametrize("strategy", registry.names())
def test_every_registered_strategy_runs_in_the_simulator(strategy):
    r = simulate_run(strategy, small_cfg(tasks=80, steps_per_epoch=40), costs_module.load(),
                     learn=True)
    assert r["stopped"] is None and r["applied_tasks"] > 0.6 * r["tasks"]
    assert r["final_accuracy"] > 0.2  # it learned something (chance: 0.1)


def test_device_times_are_the_profiles_own_draws():
    p = Profile.parse("slow=2:3;straggle=0.2x5;change=1@7:4;seed=3;horizon=16")
    d = DeviceTimes(p, 4)
    for w in range(4):
        for t in range(40):
            assert d.slowdown(w, t) == p.slowdown(w, t, 4)


def test_the_real_engine_and_policies_decide_rounds():
    # EPSP drops the 4x worker from most rounds (its own projection), BSP never does.
    epsp = simulate_run("epsp", small_cfg(tasks=200, steps_per_epoch=100), CostModel())
    bsp = simulate_run("bsp", small_cfg(tasks=200, steps_per_epoch=100), CostModel())
    assert bsp["tasks_per_worker"] == [50, 50, 50, 50]
    assert epsp["tasks_per_worker"][3] < epsp["tasks_per_worker"][0] / 2
    assert epsp["samples_per_sec"] > 1.5 * bsp["samples_per_sec"]


def test_a_bsp_round_waits_for_its_slowest_task():
    c = CostModel(jitter_quantiles_s=(0.0, 0.0))
    sim = Simulation("bsp", small_cfg(tasks=8, steps_per_epoch=8, profile="slow=1:3"), c)
    sim.fit()
    r = sim.engine.rounds[1]  # warm: no first-step or first-apply cost
    device = 0.3  # 3 x base_ms
    # Worker 1's step is the second the chief launches; it reads and pushes the model.
    assert r.t_close - r.t_open == pytest.approx(2 * c.dispatch_s + c.task_s + device
                                                 + c.param_bytes * c.ps_s_per_byte, abs=5e-4)


def test_stale_steps_still_take_their_worker_time():
    # Backup workers: the straggler's step finds its round closed, but its worker is busy.
    sim = Simulation("backup", small_cfg(tasks=40, steps_per_epoch=40), CostModel())
    sim.fit()
    dropped = [r for r in sim.monitor.tasks if not r.applied]
    assert dropped and all(r.worker == 3 and r.end - r.start > 0.4 for r in dropped)


@pytest.mark.slow
def test_sweep_to_a_thousand_workers_runs_the_engine():
    cfg = small_cfg(workers=1000, profile="classes=fast:750@1,slow:250@4", tasks=2000,
                    steps_per_epoch=1000)
    r = simulate_run("bsp", cfg, costs_module.load())
    assert r["rounds"] == 2 and r["tasks"] == 2000
    assert r["efficiency"] < 0.3  # the chief launches 1000 closures a round, one at a time


def test_the_token_launch_changes_only_what_the_chief_pays_per_task_and_per_round():
    # 64 workers: closures cost the chief 2 ms each, serially (the sweep's collapse).
    cfg = small_cfg(workers=64, profile="classes=fast:48@1,slow:16@4", tasks=640,
                    steps_per_epoch=320)
    c = CostModel(dispatch_s=0.002, jitter_quantiles_s=(0.0, 0.0), token_ps_task_s=0.0)
    closures = simulate_run("hps", cfg, c)
    tokens = simulate_run("hps", cfg, c, launch="tokens")
    assert (closures["launch"], tokens["launch"]) == ("closures", "tokens")
    # A round of 64 tasks: ~128 ms of serial launches under closures, ~9 ms under tokens.
    assert closures["mean_round_ms"] - tokens["mean_round_ms"] > 80
    assert tokens["steady_efficiency"] > 1.3 * closures["steady_efficiency"]
    # The control: tokens that cost the chief what a closure does are the same run.
    same = simulate_run("hps", cfg, dataclasses.replace(c, token_task_s=c.dispatch_s,
                                                        token_round_s=0.0), launch="tokens")
    assert same["samples_per_sec"] == closures["samples_per_sec"]
    assert same["timeline"] == closures["timeline"]


def test_the_token_queues_ps_serves_each_token_one_at_a_time():
    # The carriers keep lane w's queues on PS w % P, which serves each of its tokens'
    # dequeue and done record (~1.5 ms of its CPU, measured): with one PS a round of 64
    # tokens waits on it as closures wait on the chief; four PS share the wait.
    c = CostModel(dispatch_s=0.002, jitter_quantiles_s=(0.0, 0.0), token_ps_task_s=0.0)
    served = dataclasses.replace(c, token_ps_task_s=0.002)

    def longer_ms(num_ps):  # what the PS's service adds to a round
        cfg = small_cfg(workers=64, profile="classes=fast:48@1,slow:16@4", tasks=640,
                        steps_per_epoch=320, ps=num_ps)
        free = simulate_run("hps", cfg, c, launch="tokens")["mean_round_ms"]
        return simulate_run("hps", cfg, served, launch="tokens")["mean_round_ms"] - free

    one, four = longer_ms(1), longer_ms(4)
    assert one > 128  # 64 tokens x 2 ms, one after another (measured 190)
    assert 10 < four < one / 3  # 16 a PS, the four PS at once (measured 47)
    cfg = small_cfg(workers=64, profile="classes=fast:48@1,slow:16@4", tasks=640,
                    steps_per_epoch=320)
    assert simulate_run("hps", cfg, c)["samples_per_sec"] == simulate_run(
        "hps", cfg, served)["samples_per_sec"]  # closures pay nothing on the PS to launch


@pytest.mark.parametrize("spec, why", [("asp", "runs asynchronous steps\\."),
                                       ("auto", "asynchronous steps part of the time\\.")])
def test_the_token_launch_is_refused_to_asynchronous_steps(spec, why):
    with pytest.raises(ValueError, match=rf"^{spec}: launch='tokens' .*{why} Fix: "
                                         r"launch='closures'"):
        Simulation(spec, small_cfg(), CostModel(), launch="tokens")
    with pytest.raises(ValueError, match=r"launch='fanout': expected one of closures, tokens"):
        Simulation("hps", small_cfg(), CostModel(), launch="fanout")


def test_the_efficiency_under_way_leaves_out_the_set_up_and_first_steps():
    cfg = small_cfg(tasks=400, steps_per_epoch=100)
    quick, slow_start = CostModel(), CostModel(setup_s=5.0, first_task_s=2.0)
    a, b = (simulate_run("hps", cfg, c) for c in (quick, slow_start))
    assert b["efficiency"] < 0.85 * a["efficiency"]  # the whole run pays the start
    assert b["steady_efficiency"] == pytest.approx(a["steady_efficiency"], rel=0.05)
    assert a["steady_efficiency"] > a["efficiency"]


def test_fit_submitting_a_round_checks_the_workers_once_not_once_per_task(monkeypatch):
    # fit submits a round's tasks one by one; a pump that finds the round still short of
    # tasks checked every worker's lane each time: O(N^2) a round, ~110 ms of the fit
    # thread's Python a round at 1000 workers.
    checks = []
    held = RoundCycle._lane_held
    monkeypatch.setattr(RoundCycle, "_lane_held",
                        lambda self, w, slot: checks.append(w) or held(self, w, slot))
    cfg = small_cfg(workers=64, profile="classes=fast:48@1,slow:16@4", tasks=640,
                    steps_per_epoch=320)
    r = simulate_run("hps", cfg, CostModel())
    assert r["rounds"] == 10 and len(checks) <= 2 * 64 * r["rounds"], len(checks)
    # AutoStrategy keeps fit's queue short: its submits come between events, and each pump
    # found out again that the round takes more tasks than are queued.
    checks.clear()
    r = simulate_run("auto", cfg, CostModel())
    assert len(checks) <= 3 * 64 * r["rounds"], (len(checks), r["rounds"])


@pytest.mark.parametrize("strategy", registry.names())
def test_a_pump_skipped_while_fit_submits_changes_nothing(strategy, monkeypatch):
    # The same run, step for step, with every pump made in full (both skips switched off:
    # nothing but submits since the last pump; fewer tasks queued than the round takes).
    cfg = small_cfg(workers=5, profile="slow=2:3;straggle=0.2x3;seed=2", tasks=100,
                    steps_per_epoch=50)
    skipping = simulate_run(strategy, cfg, costs_module.load(), learn=True)
    monkeypatch.setattr(RoundCycle, "_waits_for_more", lambda self: False)
    monkeypatch.setattr(RoundCycle, "_min_steps", staticmethod(lambda book: None))
    every = simulate_run(strategy, cfg, costs_module.load(), learn=True)
    assert skipping["timeline"] == every["timeline"]
    assert skipping["accuracy_curve"] == every["accuracy_curve"]


@pytest.mark.parametrize("strategy", ["hps", "epsp", "auto", "bsp"])
def test_the_monitors_incremental_estimates_change_no_plan(strategy, monkeypatch):
    # The same run, step for step, with every estimate recomputed from the whole history.
    from tf_hetero.telemetry.monitor import Monitor

    cfg = small_cfg(workers=5, profile="slow=2:3;straggle=0.2x3;change=1@30:3;seed=2",
                    tasks=200, steps_per_epoch=100)
    incremental = simulate_run(strategy, cfg, costs_module.load(), learn=True)
    monkeypatch.delattr(Monitor, "smoothed")
    recomputed = simulate_run(strategy, cfg, costs_module.load(), learn=True)
    assert incremental["timeline"] == recomputed["timeline"]
    assert incremental["samples_per_worker"] == recomputed["samples_per_worker"]


def test_the_sized_plans_never_go_through_a_workers_history_again(monkeypatch):
    # Only the warm-up tasks are smoothed from a list (before any warm one is known); the
    # rest is the monitor's incremental estimate, whatever the fit's length.
    from tf_hetero.policies import estimate

    lengths = []
    smoothed_time = estimate.smoothed_time
    monkeypatch.setattr(estimate, "smoothed_time",
                        lambda d, *a, **kw: lengths.append(len(d)) or smoothed_time(d, *a, **kw))
    r = simulate_run("hps", small_cfg(tasks=200, steps_per_epoch=100), CostModel())
    assert r["rounds"] == 50 and max(lengths, default=0) <= estimate.WARMUP_TASKS, lengths


def test_a_rounds_count_of_tasks_in_is_not_made_again_at_each_question(monkeypatch):
    # Backup workers ask at every task's end: counted each time, 64 workers asked ~40,000
    # task states over 10 rounds.
    from tf_hetero.engine import state

    looked = []
    is_in = state._is_in  # pylint: disable=protected-access
    monkeypatch.setattr(state, "_is_in", lambda t: looked.append(t) or is_in(t))
    cfg = small_cfg(workers=64, profile="classes=fast:48@1,slow:16@4", tasks=640,
                    steps_per_epoch=320)
    r = simulate_run("backup", cfg, CostModel())
    assert len(looked) <= r["tasks"], len(looked)


def test_autos_cut_off_looks_through_a_round_only_when_the_task_holding_it_lets_go(monkeypatch):
    # Past its cut-off time auto's round asks at every tick and every task's end whether
    # every task still out is late: each look went through the round's tasks (O(N^2) a
    # round). The task found holding the round, the one expected to end last, is kept; while
    # it holds, so does the round. The same run with the holder forgotten at each look:
    from tf_hetero.policies import auto

    looked, cut = [], []
    holds, should_close = auto._holds, auto.AutoController.should_close  # pylint: disable=protected-access
    monkeypatch.setattr(auto, "_holds", lambda t, *a: looked.append(t) or holds(t, *a))

    def closing(self, rnd, now):
        out = should_close(self, rnd, now)
        cut.append(out and not rnd.all_done)
        return out

    monkeypatch.setattr(auto.AutoController, "should_close", closing)
    cfg = small_cfg(workers=32, profile="straggle=0.2x5;seed=3", tasks=640, steps_per_epoch=320)
    kept = simulate_run("auto", cfg, costs_module.load())
    n_kept, n_cut = len(looked), sum(cut)
    looked.clear()
    monkeypatch.setattr(auto.AutoController, "_holder",
                        property(lambda self: None, lambda self, value: None), raising=False)
    forgotten = simulate_run("auto", cfg, costs_module.load())
    assert kept["timeline"] == forgotten["timeline"]
    assert n_cut > 0  # rounds closed at the cut-off, with tasks out
    assert n_kept * 3 < len(looked), (n_kept, len(looked), n_cut)  # 1486 and 7793


def test_task_transfer_looks_through_a_round_only_once_its_first_started_task_may_be_due(
        monkeypatch):
    # EPSP asks after every event whether a running task is due for a copy: each look went
    # through the round's tasks. While the task that started first at the last look is not
    # due, none is. The same run with that forgotten at each look:
    from tf_hetero.engine.transfer import TaskTransfer
    from tf_hetero.policies.transfer import TransferAfter

    asked, copies = [], []
    should, free_lane = TransferAfter.should_transfer, TaskTransfer._free_lane  # pylint: disable=protected-access
    monkeypatch.setattr(TransferAfter, "should_transfer",
                        lambda self, *a: asked.append(1) or should(self, *a))
    monkeypatch.setattr(TaskTransfer, "_free_lane",  # a lane found: a copy is made
                        lambda self, rnd: copies.append(free_lane(self, rnd)) or copies[-1])
    cfg = small_cfg(workers=32, profile="slow=8:4;straggle=0.1x5;seed=3", tasks=640,
                    steps_per_epoch=320)
    kept = simulate_run("epsp", cfg, costs_module.load())
    n_kept = len(asked)
    asked.clear()
    monkeypatch.setattr(TaskTransfer, "_quiet", property(lambda self: None, lambda self, v: None),
                        raising=False)
    forgotten = simulate_run("epsp", cfg, costs_module.load())
    assert kept["timeline"] == forgotten["timeline"]
    assert any(lane is not None for lane in copies), "no task was copied"
    assert n_kept * 3 < len(asked), (n_kept, len(asked))  # 4346 and 39058


@pytest.mark.parametrize("strategy", registry.names())
def test_the_kept_count_of_tasks_in_is_the_count_whenever_it_is_asked(strategy, monkeypatch):
    # Transient stragglers: EPSP transfers tasks (twins), backup workers and slack sync
    # close on counts, the ticker asks at every tick.
    from tf_hetero.engine.state import Round, TaskState

    kept, asked = Round.num_done, []

    def checked(rnd):
        n = kept.fget(rnd)
        assert n == sum(t.state == TaskState.DONE or (t.twin is not None and
                                                      t.twin.state == TaskState.DONE)
                        for t in rnd.tasks), (rnd.id, n)
        asked.append(n)
        return n

    monkeypatch.setattr(Round, "num_done", property(checked))
    cfg = small_cfg(workers=5, profile="slow=2:3;straggle=0.3x4;seed=4", tasks=200,
                    steps_per_epoch=100)
    simulate_run(strategy, cfg, costs_module.load())
    if strategy in ("backup", "epspslack"):  # they close on counts
        assert asked  # the count was asked for


# ------------------------------------------------------------ statistical model
def test_gradient_matches_finite_differences():
    m = Learner(num_workers=1, batch_size=8, lr=0.1, seed=0)
    rng = np.random.default_rng(0)
    m._rng = np.random.default_rng(5)
    g = m.gradient(m.params, 0, 8)
    for i in rng.choice(m.params.size, 5, replace=False):
        def loss(p):
            m._rng, m._order[0] = np.random.default_rng(5), np.empty(0, np.int64)
            x, y = m._batch(0, 8)
            h = x
            layers = m.layers(p)
            for k in range(0, 4, 2):
                h = np.maximum(h @ layers[k] + layers[k + 1], 0)
            z = h @ layers[4] + layers[5]
            z = z - z.max(1, keepdims=True)
            return float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(8), y]))
        e = np.zeros_like(m.params, dtype=np.float64)
        e[i] = 1e-3
        p64 = m.params.astype(np.float64)
        assert (loss(p64 + e) - loss(p64 - e)) / 2e-3 == pytest.approx(g[i], abs=2e-4)


def test_the_cnn1d_gradient_matches_finite_differences_and_its_logits_a_direct_convolution():
    # The bench's cnn1d on MNIST-1D-shaped signals: TF's "same" padding at stride 2 (1 before,
    # 2 after for kernel 5), Keras's Flatten order, the kernels in Keras's (kernel, in, out).
    from tf_hetero.sim.nets import CNN1D

    rng = np.random.default_rng(0)
    net = CNN1D((40, 1), 10, rng)
    x, y = rng.normal(size=(6, 40, 1)), rng.integers(0, 10, 6)
    p64 = net.init.astype(np.float64)

    def direct(p):  # each output position summed tap by tap, no patches
        layers, h = net.layers(p), x
        for w, b in zip(layers[0:6:2], layers[1:6:2]):
            padded = np.pad(h, ((0, 0), (1, 2), (0, 0)))
            out = (h.shape[1] + 1) // 2
            h = np.maximum(np.stack([sum(padded[:, 2 * o + j] @ w[j] for j in range(5))
                                     for o in range(out)], axis=1) + b, 0)
        return h.reshape(len(x), -1) @ layers[6] + layers[7]

    assert np.allclose(net.logits(p64, x), direct(p64))
    loss, g = net.loss_grad(p64, x, y)
    for i in rng.choice(net.size, 12, replace=False):
        e = np.zeros_like(p64)
        e[i] = 1e-5
        numeric = (net.loss_grad(p64 + e, x, y)[0] - net.loss_grad(p64 - e, x, y)[0]) / 2e-5
        assert numeric == pytest.approx(g[i], abs=1e-5, rel=1e-4), i


def test_the_cnn1d_exact_noise_is_the_per_example_gradients_spread():
    from tf_hetero.sim.nets import CNN1D

    rng = np.random.default_rng(1)
    net = CNN1D((40, 1), 10, rng)
    x, y = rng.normal(size=(7, 40, 1)), rng.integers(0, 10, 7)
    per = np.stack([net.loss_grad(net.init.astype(np.float64), x[k:k + 1], y[k:k + 1])[1]
                    for k in range(7)]).astype(np.float64)
    trace, signal = net.exact_noise(net.init.astype(np.float64), x, y, chunk=3)
    mean = per.mean(axis=0)
    assert signal == pytest.approx(float(mean @ mean), rel=1e-4)
    assert trace == pytest.approx(float(np.mean(np.sum(per * per, axis=1))) - signal, rel=1e-4)


@pytest.mark.slow  # MNIST-1D is generated, ~4 s a process
def test_the_learner_trains_the_cnn1d_on_mnist1d_and_refuses_a_model_it_does_not_have():
    m = Learner(num_workers=2, batch_size=32, lr=0.1, seed=0, dataset="mnist1d",
                per_worker="reshuffle")
    assert m.params.size == 7710 and m.param_bytes == 30840  # the bench's cnn1d
    before = m.accuracy()
    for _ in range(150):
        m.apply_async(m.gradient(m.params, worker=0, rows=32))
    assert m.accuracy() > before + 0.15
    with pytest.raises(ValueError, match=r"no 'cnn' on 'digits'.*Fix: one of those"):
        Learner(num_workers=2, batch_size=32, lr=0.1, model="cnn")


def test_a_diverging_simulated_run_says_so_in_its_accuracy_not_in_numpy_warnings():
    import warnings

    cfg = small_cfg(workers=4, profile="slow=1:4", tasks=120, steps_per_epoch=40, base_lr=50.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning would fail the run here
        r = simulate_run("bsp", cfg, costs_module.load(), learn=True, stop_on_divergence=False)
    assert r["final_accuracy"] < 0.2  # it diverged (chance: 0.1)


def test_a_bsp_round_applies_one_step_on_the_mean_gradient_of_what_was_read():
    sim = Simulation("bsp", small_cfg(tasks=4, steps_per_epoch=4, momentum=0.0), CostModel(),
                     learn=True)
    before = sim.learner.params.copy()
    grads = []
    real = sim.learner.gradient
    sim.learner.gradient = lambda params, w, rows: grads.append(
        (params.copy(), real(params, w, rows))) or grads[-1][1]
    sim.fit()
    assert len(grads) == 4 and all(np.array_equal(p, before) for p, _ in grads)
    expected = before - sim.lr * np.mean([g for _, g in grads], axis=0)
    assert np.allclose(sim.learner.params, expected, atol=1e-6)


def test_a_round_whose_velocity_is_scaled_steps_with_the_scaled_velocity():
    """``apply_round(velocity=f)`` scales the momentum's velocity before the update, as the
    runtime's apply does (tf_keras' rule ``m = momentum m - lr g; w += m``)."""
    m = Learner(num_workers=1, batch_size=8, lr=0.1, momentum=0.9, seed=0)
    g = m.gradient(m.params, 0, 8)
    m.write(0, 0, 0, g * 8, 8)
    m.apply_round(0, 0, {0: 8}, {})
    v, p = m.velocity.copy(), m.params.copy()
    m.write(0, 0, 1, g * 8, 8)
    m.apply_round(1, 0, {0: 8}, {}, velocity=0.25)
    assert np.allclose(m.velocity, 0.9 * 0.25 * v - 0.1 * g, atol=1e-7)
    assert np.allclose(m.params, p + m.velocity, atol=1e-7)


def test_async_steps_read_the_model_before_their_peers_updates():
    sim = Simulation("pss", small_cfg(tasks=20, steps_per_epoch=20), CostModel(), learn=True)
    seen = []
    real = sim.learner.gradient
    sim.learner.gradient = lambda params, w, rows: seen.append(
        (sim.learner.updates, params is sim.learner.params)) or real(params, w, rows)
    sim.fit()
    # Each step's gradient is taken on the parameters it read at its start; some were
    # updated by other workers in between (staleness), as the measured runs record.
    assert len(seen) == 20 and sim.learner.updates == 20
    assert any(not fresh for _, fresh in seen)


@pytest.mark.slow
def test_statistical_model_learns_digits_and_suffers_from_pipelined_staleness():
    # 400 micro-batches: since async steps apply at their end (as the emulation does), stock
    # PSS's staleness is ~N-1 and it needs more than 200 to pass 0.8 (0.78 at 200).
    cfg = small_cfg(tasks=400, steps_per_epoch=100)
    final = {}
    for spec in ("pss", "bsp", "epspslack", "hps", "hpspipe"):
        r = simulate_run(spec, cfg, costs_module.load(), learn=True)
        final[spec] = r["final_accuracy"]
        if spec != "hpspipe":
            assert r["final_accuracy"] > 0.8, (spec, r["final_accuracy"])
            assert r["time_to_target_s"] is not None and r["time_to_target_s"] < r["span_s"]
    # Pipelined pushes apply every gradient a round late; at the linear rule's rate with
    # momentum 0.9 that stalls training (the measured run diverged: final accuracy 0.08).
    assert final["hpspipe"] < final["hps"] - 0.3, final


def test_the_uncontended_cost_model_is_the_shipped_one_but_its_closures_apply_and_jitter(
        shipped):
    # benchmarks/uncontended_projection.py writes it from the shipped calibration and the
    # quiet one-worker run; refitting either without writing it again leaves the projection
    # on stale costs.
    unc = costs_module.load(costs_module.UNCONTENDED_PATH)
    changed = {f.name for f in dataclasses.fields(CostModel)
               if getattr(unc, f.name) != getattr(shipped, f.name)}
    assert changed == {"task_s", "stock_s", "apply_s", "jitter_quantiles_s", "source"}
    assert unc.task_s == unc.stock_s < shipped.stock_s and unc.apply_s < shipped.apply_s
    with open(os.path.join(validate.MEASURED_DIR, "quiet", "one_worker.json")) as f:
        closure_s, jitter = calibrate.quiet_step(json.load(f))
    assert unc.stock_s == closure_s and unc.jitter_quantiles_s == jitter
