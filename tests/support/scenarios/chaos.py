"""Chaos scenarios for any registered strategy, on a multi-process LocalCluster (3 workers,
1 PS). Each run prints nothing and writes one JSON file of results and counts.

    python chaos.py chaos STRATEGY OUT.json         # 3 worker kills + restarts in one fit
    python chaos.py ps STRATEGY OUT.json CKPT       # kill the PS mid-fit; BackupAndRestore
    python chaos.py resume STRATEGY OUT.json CKPT   # a new cluster; the fit resumes from CKPT

Run as its own process (a fresh chief for a fresh cluster) by tests/cluster/test_failures.py and by
benchmarks/chaos.py, which judge the JSON with :func:`check_chaos` and :func:`check_resume`
(pure functions: importing this module starts no TensorFlow).

``chaos``: one fit of many short epochs; a thread kills worker 1, waits for progress,
restarts it, waits until it has finished a task again (or a bound), then does the same to
worker 2 and then worker 0, so two workers are always up. Once the third restart is
done the fit is stopped at the next epoch end but one. Then it counts, from the engine's
books: every task ``fit`` scheduled is in exactly one round and ends applied (done/folded)
or dropped, each apply reported the micro-batches the engine counted for it, and
``optimizer.iterations`` equals the updates the engine applied.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
import traceback

STARTED_AT = time.time()  # the runner's "seconds holding the lock" (it waited before this)
WORKERS, BATCH, STEPS_PER_EPOCH = 3, 16, 30
#: The chaos fit stops itself once the kills are done; this bounds it if they never end.
MAX_EPOCHS = 80
#: One at a time: two workers always stay up. CHAOS_KILL_ORDER="1,2,0" overrides it.
KILL_ORDER = tuple(int(w) for w in os.environ.get("CHAOS_KILL_ORDER", "1,2,1").split(","))
#: Tasks finished after a kill before the restart (the survivors must carry the fit).
PROGRESS_AFTER_KILL = 2 * WORKERS
#: Bound on a restarted worker finishing its first task again (TF's reconnection).
REJOIN_TIMEOUT_S = 90
#: PS scenario: epochs, and tasks finished in the second epoch before the PS is killed.
PS_EPOCHS, PS_STEPS = 3, 15
APPLIED = ("done", "folded")
#: "absorbed": a step a sized round covered without running (a worker was dead).
ENDED = ("done", "folded", "dropped", "absorbed")


# --------------------------------------------------------------------------- judging (pure)
def check_chaos(r: dict) -> list[str]:
    """What is wrong with a chaos run's result (empty: it passed)."""
    if r.get("error"):
        return [f"scenario raised {r['error']['type']}: {r['error']['message'][:300]}"]
    problems = []
    if r["kills"] < 3:
        problems.append(f"only {r['kills']} worker kills happened during the fit "
                        f"(chaos log: {r['chaos_log'][-3:]})")
    if r.get("chaos_error"):
        problems.append(f"chaos thread: {r['chaos_error']}")
    c = r["counts"]
    if r["mode"] == "async":
        if c["monitor_tasks"] != c["scheduled"]:
            problems.append(f"{c['monitor_tasks']} tasks finished, {c['scheduled']} scheduled")
        if c["unapplied_records"]:
            problems.append(f"{c['unapplied_records']} async tasks recorded as not applied")
        if not c["iterations"] == c["version"] == c["scheduled"]:
            problems.append(f"iterations {c['iterations']}, engine updates {c['version']}, "
                            f"scheduled {c['scheduled']}: must all be equal")
    else:
        if c["fit_tasks"] != c["scheduled"]:
            problems.append(f"{c['fit_tasks']} tasks in rounds, {c['scheduled']} scheduled "
                            "(a task lost or added)")
        if c["in_two_rounds"]:
            problems.append(f"{c['in_two_rounds']} task(s) in more than one round")
        if c["round_mismatch"]:
            problems.append(f"task.round disagrees with the round holding it: "
                            f"{c['round_mismatch']}")
        if c["not_ended"]:
            problems.append(f"tasks not ended (state: count): {c['not_ended']}")
        if c["twin_both_applied"]:
            problems.append(f"{c['twin_both_applied']} transferred task(s) applied twice")
        if c["unapplied_rounds"]:
            problems.append(f"rounds never applied: {c['unapplied_rounds'][:5]}")
        if c["lane_mismatch"]:
            problems.append("apply reported other micro-batches than the engine counted "
                            f"(round, applied, lanes): {c['lane_mismatch'][:5]}")
        if c["applied_units"] != c["applied_total"]:
            problems.append(f"rounds applied {c['applied_total']} micro-batches, tasks applied "
                            f"{c['applied_units']}")
        if not c["iterations"] == c["applied_rounds"] == c["version"]:
            problems.append(f"iterations {c['iterations']}, applied rounds "
                            f"{c['applied_rounds']}, engine version {c['version']}: "
                            "must all be equal (a round lost or applied twice)")
        if c["monitor_applied"] != c["states"].get("done", 0) + c["states"].get("folded", 0):
            problems.append(f"monitor applied {c['monitor_applied']} tasks, engine "
                            f"{c['states']}")
    if not c["idle"]:
        problems.append("engine not idle after fit returned")
    return problems


def check_resume(ps: dict, resumed: dict) -> list[str]:
    """What is wrong with a PS-kill run and its resume (empty: both passed)."""
    problems = []
    if ps.get("error_raised") is None:
        problems.append(f"the fit did not raise after the PS kill ({ps.get('error')})")
    else:
        e = ps["error_raised"]
        if e["type"] != "ParameterServerError" or "BackupAndRestore" not in e["message"]:
            problems.append(f"PS kill raised {e['type']}: {e['message'][:300]}")
    if ps.get("error"):
        problems.append(f"PS scenario failed: {ps['error']['type']}: "
                        f"{ps['error']['message'][:300]}")
    if resumed.get("error"):
        problems.append(f"resume raised {resumed['error']['type']}: "
                        f"{resumed['error']['message'][:300]}")
        return problems
    saved = ps.get("epoch_end_iterations", [])
    if not saved:
        problems.append("the PS was killed before epoch 1 ended: nothing saved")
        return problems
    if resumed["epochs_run"] != PS_EPOCHS - len(saved):
        problems.append(f"resumed fit ran {resumed['epochs_run']} epochs; {len(saved)} "
                        f"were saved of {PS_EPOCHS}")
    if resumed["checkpoint_iterations"] != saved[-1]:
        problems.append(f"checkpoint holds iterations {resumed['checkpoint_iterations']}, "
                        f"the killed fit had {saved[-1]} at its last epoch end")
    if resumed["restored_iterations"] != saved[-1]:
        problems.append(f"resume restored iterations {resumed['restored_iterations']}, "
                        f"saved {saved[-1]}")
    if resumed["iterations"] != resumed["restored_iterations"] + resumed["new_updates"]:
        problems.append(f"resumed fit ended at iterations {resumed['iterations']} != restored "
                        f"{resumed['restored_iterations']} + new updates {resumed['new_updates']}")
    if resumed.get("counts"):
        problems += [f"resumed fit: {p}" for p in check_chaos(
            dict(resumed, kills=3, chaos_log=[], error=None))]
    return problems


# --------------------------------------------------------------------------- running (TF)
def when(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def build(strategy, keras3: bool = False):
    """The scenarios' model (a tf_keras one, or ``keras3``: the same layers in Keras 3, trained
    through ``tf_hetero.keras3.enable()``) and its data."""
    import tf_hetero

    keras = tf_hetero.models.keras_module(keras3)
    if keras3:
        tf_hetero.keras3.enable()
    train = tf_hetero.data.load("digits", "train")
    with strategy.scope():
        model = tf_hetero.models.mlp(input_shape=train.input_shape, hidden=(32,), keras3=keras3)
        model.compile(keras.optimizers.SGD(0.05),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tf_hetero.emulate(model, "base_ms=60", strategy=strategy)
    data = tf_hetero.data.dataset_fn(batch_size=BATCH, num_workers=WORKERS, data=train)
    return model, data if keras3 else keras.utils.experimental.DatasetCreator(data)


def counts(strategy, model, scheduled: int, monitor=None) -> dict:
    """The engine's books after a fit, counted (see check_chaos)."""
    engine = getattr(strategy, "engine", None)
    monitor = monitor or strategy.monitor
    iterations = int(model.optimizer.iterations.numpy())
    c = dict(scheduled=scheduled, iterations=iterations, monitor_tasks=len(monitor.tasks),
             monitor_applied=monitor.summary()["applied_tasks"],
             idle=engine.idle() if engine is not None else True,
             version=engine.version if engine is not None else None,
             submitted=getattr(engine, "_next_task", None))
    if engine is None or not engine.rounds_mode:
        c.update(unapplied_records=sum(not t.applied for t in monitor.tasks))
        if engine is None:  # each task applies itself once: iterations must be scheduled
            c["version"] = scheduled
            if getattr(monitor, "stock", False):  # records include failed closure runs
                c.update(stock=True, monitor_tasks=scheduled, unapplied_records=0)
        return c
    holders = collections.defaultdict(list)
    for r in engine.rounds:
        for t in r.tasks + r.absorbed:
            holders[id(t)].append(r.id)
    fit_tasks = [t for r in engine.rounds for t in r.tasks + r.absorbed if not t.drain]
    unique = {id(t): t for t in fit_tasks}
    copies = [cp for r in engine.rounds for cp in r.copies]
    every = list(unique.values()) + copies
    states = collections.Counter(str(t.state) for t in every)
    c.update(
        fit_tasks=len(unique), listed=len(fit_tasks),
        drain_tasks=sum(t.drain for r in engine.rounds for t in r.tasks),
        in_two_rounds=sum(len(v) > 1 for v in holders.values()),
        round_mismatch=[(t.id, t.round, holders[id(t)]) for t in unique.values()
                        if [t.round] != holders[id(t)]][:5],
        not_ended=dict(collections.Counter(str(t.state) for t in every
                                           if str(t.state) not in ENDED)),
        twin_both_applied=sum(sum(x is not None and str(x.state) in APPLIED
                                  for x in (t, t.twin)) > 1 for t in unique.values()),
        unapplied_rounds=[r.id for r in engine.rounds if r.applied < 0],
        lane_mismatch=[(r.id, r.applied, dict(r.lanes), {str(k): v for k, v in r.folds.items()})
                       for r in engine.rounds
                       if r.applied >= 0 and (r.applied <= sum(r.lanes.values()) if r.folds
                                              else r.applied != sum(r.lanes.values()))],
        # Folded tasks (late gradients): where they ran, which lane and round they wrote.
        folded=[dict(id=t.id, round=t.round, worker=t.worker, pinned=t.pinned, lane=t.lane,
                     size=t.size, duplicate=t.duplicate, stale=t.stale)
                for t in every if str(t.state) == "folded"][:20],
        applied_units=sum(t.size for t in every if str(t.state) in APPLIED),
        applied_total=sum(max(r.applied, 0) for r in engine.rounds),
        applied_rounds=sum(r.applied > 0 for r in engine.rounds),
        rounds=len(engine.rounds),
        kinds=dict(collections.Counter(str(r.kind) for r in engine.rounds)),
        abandoned=sum(r.abandoned for r in engine.rounds),
        states=dict(states))
    # Units applied by the rounds include late gradients folded in, which the task states
    # count too (folded); drains push held micro-batches already counted as done.
    return c


class StockLog:
    """The monitor's ``tasks``/``summary`` for stock PSS (the control row): every closure a
    worker thread ran, failed runs included (TF re-runs a closure a dead worker failed)."""

    stock = True

    def __init__(self, strategy):
        from tf_hetero.telemetry.tasklog import TaskLog

        self.log = TaskLog.for_strategy(strategy)

    @property
    def tasks(self):
        return self.log.records

    def summary(self):
        return {"applied_tasks": len(self.log)}


def chaos_scenario(name: str, out: str) -> dict:
    import tf_keras as keras

    import tf_hetero
    from tf_hetero.strategies import registry

    with tf_hetero.LocalCluster(WORKERS, 1, processes=True) as cluster:
        strategy = registry.make(name, cluster.resolver)
        model, data = build(strategy)
        monitor = getattr(strategy, "monitor", None)
        if monitor is None:  # stock PSS (the control): TF's closures, timed by a TaskLog
            monitor = StockLog(strategy)
        log, state = [], dict(kills=0, restarts=0, rejoined=[], finished=False, error=None)
        t0 = time.monotonic()

        def note(what):
            log.append(f"{time.monotonic() - t0:6.1f}s tasks={len(monitor.tasks)} {what}")
            print(f"[chaos] {log[-1]}", file=sys.stderr, flush=True)

        def by(w):
            return sum(t.worker == w for t in list(monitor.tasks))

        def chaos():
            try:
                if not when(lambda: len(monitor.tasks) >= 2 * WORKERS, 180):
                    raise TimeoutError("no task finished within 180 s of the fit's start")
                for w in KILL_ORDER:
                    n = len(monitor.tasks)
                    cluster.kill("worker", w)
                    state["kills"] += 1
                    note(f"killed worker {w}")
                    if not when(lambda: len(monitor.tasks) >= n + PROGRESS_AFTER_KILL, 120):
                        raise TimeoutError(f"no progress within 120 s after killing worker {w}"
                                           f" ({len(monitor.tasks) - n} tasks)")
                    before = by(w)
                    cluster.restart("worker", w)
                    state["restarts"] += 1
                    note(f"restarted worker {w}")
                    ok = when(lambda: by(w) > before, REJOIN_TIMEOUT_S)
                    state["rejoined"].append(ok)
                    note(f"worker {w} {'finished a task again' if ok else 'did NOT rejoin'}")
                    n = len(monitor.tasks)
                    when(lambda: len(monitor.tasks) >= n + WORKERS, 60)
            except Exception as e:  # noqa: BLE001 - reported in the result
                state["error"] = f"{type(e).__name__}: {e}"
                note(state["error"])
            finally:
                state["finished"] = True

        class StopAfterChaos(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.done_at = None

            def on_epoch_end(self, epoch, logs=None):
                if state["finished"] and self.done_at is None:
                    self.done_at = epoch
                if self.done_at is not None and epoch >= self.done_at + 1:
                    self.model.stop_training = True

        thread = threading.Thread(target=chaos, daemon=True)
        thread.start()
        history = model.fit(data, epochs=MAX_EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, verbose=0,
                            callbacks=[StopAfterChaos()])
        fit_s = time.monotonic() - t0
        thread.join(timeout=5)
        epochs = len(history.history["loss"])
        engine = getattr(strategy, "engine", None)
        result = dict(
            strategy=name, mode=("rounds" if engine is not None and engine.rounds_mode
                                 else "async"),
            fit_s=round(fit_s, 1), epochs_run=epochs, kills=state["kills"],
            restarts=state["restarts"], rejoined=state["rejoined"],
            chaos_error=state["error"], chaos_log=log,
            live_end=engine.live_workers if engine is not None else None,
            tasks_by_worker=dict(collections.Counter(t.worker for t in monitor.tasks)),
            final_loss=float(history.history["loss"][-1]),
            counts=counts(strategy, model, epochs * STEPS_PER_EPOCH, monitor))
    return result


def ps_scenario(name: str, out: str, ckpt: str) -> dict:
    import tf_keras as keras

    import tf_hetero
    from tf_hetero.strategies import registry

    with tf_hetero.LocalCluster(WORKERS, 1, processes=True) as cluster:
        strategy = registry.make(name, cluster.resolver)
        model, data = build(strategy)
        backup = keras.callbacks.BackupAndRestore(ckpt)
        ends, killed = [], dict(at=None)

        class EpochEnds(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                ends.append(int(self.model.optimizer.iterations.numpy()))

        def kill():
            # In epoch 2: BackupAndRestore has saved epoch 1.
            if when(lambda: len(ends) >= 1, 240):
                n = len(strategy.monitor.tasks)
                when(lambda: len(strategy.monitor.tasks) >= n + 2 * WORKERS, 60)
                killed["at"] = dict(epochs_saved=len(ends), tasks=len(strategy.monitor.tasks))
                cluster.kill("ps", 0)

        threading.Thread(target=kill, daemon=True).start()
        raised = None
        t0 = time.monotonic()
        try:
            model.fit(data, epochs=PS_EPOCHS, steps_per_epoch=PS_STEPS, verbose=0,
                      callbacks=[backup, EpochEnds()])
        except Exception as e:  # noqa: BLE001 - the scenario reports what fit raised
            raised = dict(type=type(e).__name__, message=str(e))
        return dict(strategy=name, error_raised=raised, killed=killed["at"],
                    seconds_to_error=round(time.monotonic() - t0, 1),
                    epoch_end_iterations=ends)


def checkpoint_iterations(ckpt: str):
    """optimizer.iterations as BackupAndRestore saved it (None: no checkpoint found)."""
    import tensorflow as tf

    for root, _, files in os.walk(ckpt):
        if "checkpoint" in files:
            path = tf.train.latest_checkpoint(root)
            if path is None:
                continue
            reader = tf.train.load_checkpoint(path)
            keys = [k for k in reader.get_variable_to_shape_map()
                    if "optimizer" in k and "iter" in k and "OPTIMIZER_SLOT" not in k]
            if keys:
                return int(reader.get_tensor(sorted(keys, key=len)[0]))
    return None


def resume_scenario(name: str, out: str, ckpt: str) -> dict:
    import tf_keras as keras

    import tf_hetero
    from tf_hetero.strategies import registry

    saved = checkpoint_iterations(ckpt)
    with tf_hetero.LocalCluster(WORKERS, 1, processes=True) as cluster:
        strategy = registry.make(name, cluster.resolver)
        model, data = build(strategy)
        begin = {}

        class Restored(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):  # after BackupAndRestore's (listed first)
                begin["iterations"] = int(self.model.optimizer.iterations.numpy())

        history = model.fit(data, epochs=PS_EPOCHS, steps_per_epoch=PS_STEPS, verbose=0,
                            callbacks=[keras.callbacks.BackupAndRestore(ckpt), Restored()])
        engine = strategy.engine
        epochs = len(history.history["loss"])
        iterations = int(model.optimizer.iterations.numpy())
        new = engine.version if engine is not None else len(strategy.monitor.tasks)
        c = counts(strategy, model, epochs * PS_STEPS)
        # The restored count is in iterations, not in the engine's: compare the engine's.
        c["iterations"] -= begin["iterations"]
        return dict(strategy=name, epochs_run=epochs, checkpoint_iterations=saved,
                    restored_iterations=begin["iterations"], iterations=iterations,
                    new_updates=new, tasks=len(strategy.monitor.tasks),
                    mode=("rounds" if engine is not None and engine.rounds_mode else "async"),
                    counts=c)


def main(argv) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import faulthandler

    # A hang prints every thread's stack before the caller's timeout kills this process.
    dump_after = float(os.environ.get("CHAOS_DUMP_AFTER_S", "0"))
    if dump_after > 0:
        faulthandler.dump_traceback_later(dump_after, exit=False)
    kind, name, out = argv[1], argv[2], argv[3]
    try:
        if kind == "chaos":
            result = chaos_scenario(name, out)
        elif kind == "ps":
            result = ps_scenario(name, out, argv[4])
        elif kind == "resume":
            result = resume_scenario(name, out, argv[4])
        else:
            raise SystemExit(f"unknown scenario {kind!r}")
    except Exception as e:  # noqa: BLE001 - the caller reads what went wrong from the JSON
        result = dict(strategy=name, error=dict(type=type(e).__name__, message=str(e),
                                                traceback=traceback.format_exc()[-6000:]))
    result["_started_at"] = STARTED_AT
    with open(out, "w") as f:
        json.dump(result, f, default=str)
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip TF teardown against stopped or killed servers
