"""Failure scenarios on a multi-process LocalCluster; prints one JSON line of results.

    python failures.py worker OUT.json   # kill worker 1 mid-fit, then restart it
    python failures.py ps OUT.json CKPT      # kill the PS at epoch 1's end; BackupAndRestore in CKPT
    python failures.py resume OUT.json CKPT  # a new cluster; fit resumes from CKPT
    python failures.py failover OUT.json [STRATEGY [KILLS [keras3]]]  # PS 1 of 3 killed mid-fit

``KILLS`` (the failover scenario): ``1`` PS 1 after 6 applied rounds; ``2`` then PS 0 too;
``apply`` PS 1 as the 7th round's apply starts (the apply meets the dead task); ``worker``
worker 1 and PS 1 together after 6 applied rounds; ``move`` PS 1 as the first variable of a
``scale_ps([0, 2])`` after 6 applied rounds is moved (live rebalancing on); ``epoch`` PS 1
as fit joins at epoch 1's end; ``rejoin`` PS 1 after 6 applied rounds, its process started
again, and once it rejoined (at an epoch's end) PS 2, whose variables go to PS 1 (8 epochs).
``STRATEGY`` may name a worker count: ``asp:1`` (ASP on one
worker, whose steps follow one another: exact).

``ps`` and ``resume`` take a last argument ``keras3``: the same with a Keras 3 model (its own
``BackupAndRestore`` and callbacks).

Run as its own process by tests/cluster/test_failures.py (a fresh chief for a fresh cluster).
"""

import json
import os
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tf_hetero  # noqa: E402

# The model, data and cluster size of every failure scenario (chaos.py, beside this file).
from chaos import WORKERS, build  # noqa: E402


def when(predicate, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


def worker_scenario(out):
    with tf_hetero.LocalCluster(WORKERS, 1, processes=True) as cluster:
        strategy = tf_hetero.BSPStrategy(cluster.resolver, stall_timeout_s=120)
        model, data = build(strategy)
        monitor = strategy.monitor

        def kill_later():
            when(lambda: len(monitor.tasks) >= 9)
            cluster.kill("worker", 1)

        killer = threading.Thread(target=kill_later, daemon=True)
        killer.start()
        t0 = time.monotonic()
        model.fit(data, epochs=1, steps_per_epoch=45, verbose=0)
        first_fit_s = time.monotonic() - t0
        killer.join(timeout=10)
        engine = strategy.engine
        tasks = [t for r in engine.rounds for t in r.tasks]
        first = dict(first_fit_s=first_fit_s, tasks=len(tasks),
                     done=sum(t.state == "done" for t in tasks),
                     applied=sum(r.applied for r in engine.rounds),
                     live_after=engine.live_workers,
                     iterations=int(model.optimizer.iterations.numpy()))
        n_before = len(monitor.tasks)
        cluster.restart("worker", 1)
        when(lambda: 1 in engine.live_workers, timeout=120)
        model.fit(data, epochs=1, steps_per_epoch=30, verbose=0)
        second = [t.worker for t in monitor.tasks[n_before:]]
        result = dict(first=first, second_tasks_by_worker={w: second.count(w) for w in range(WORKERS)},
                      live_end=engine.live_workers)
    with open(out, "w") as f:
        json.dump(result, f)


def ps_scenario(out, ckpt, keras3=False):
    keras = tf_hetero.models.keras_module(keras3)
    with tf_hetero.LocalCluster(WORKERS, 1, processes=True) as cluster:
        strategy = tf_hetero.BSPStrategy(cluster.resolver, stall_timeout_s=120)
        model, data = build(strategy, keras3)
        backup = keras.callbacks.BackupAndRestore(ckpt)

        class KillAtFirstEpochEnd(keras.callbacks.Callback):
            """Kills the PS once BackupAndRestore (before it in the list) saved epoch 1:
            the next epoch's first op on the PS is the chief's own (tf_keras assigning a
            variable), which raised TF's raw UnavailableError before fit's errors were
            translated. (A PS killed mid-epoch: the chaos tests, test_failures.py.)"""

            def on_epoch_end(self, epoch, logs=None):
                if epoch == 0:
                    cluster.kill("ps", 0)

        error = None
        t0 = time.monotonic()
        try:
            model.fit(data, epochs=3, steps_per_epoch=15, verbose=0,
                      callbacks=[backup, KillAtFirstEpochEnd()])
        except Exception as e:  # noqa: BLE001 - the scenario reports what fit raised
            error = dict(type=type(e).__name__, message=str(e))
        result = dict(error=error, seconds_to_error=time.monotonic() - t0)
    with open(out, "w") as f:
        json.dump(result, f)


def resume_scenario(out, ckpt, keras3=False):
    keras = tf_hetero.models.keras_module(keras3)
    with tf_hetero.LocalCluster(WORKERS, 1, processes=True) as cluster:
        strategy = tf_hetero.BSPStrategy(cluster.resolver, stall_timeout_s=120)
        model, data = build(strategy, keras3)
        history = model.fit(data, epochs=3, steps_per_epoch=15, verbose=0,
                            callbacks=[keras.callbacks.BackupAndRestore(ckpt)])
        result = dict(epochs_run=len(history.history["loss"]), tasks=len(strategy.monitor.tasks),
                      iterations=int(model.optimizer.iterations.numpy()))
    with open(out, "w") as f:
        json.dump(result, f)


def failover_scenario(out, name="bsp", kills="1", flavour="tf_keras"):
    """``name`` (BSP by default) on 3 workers and 3 PS tasks (PS 2 standing by), every
    worker reading the same batch (one granule), so every round is one SGD step on it,
    whatever its shares: PS 1 is killed after a few rounds, the failover re-creates its
    variables on PS 2 from the last copy and the fit goes on. The
    final weights are compared with a local model that made ``iterations`` steps on that
    batch from the same initial weights. ``kills`` 2: PS 0 is killed too, 6 applied rounds
    after the first failover (its variables go to the surviving PS 2); ``apply``: PS 1 is
    killed on the apply thread just before the 7th round's apply runs; ``worker``: worker 1
    is killed with PS 1 (the fit goes on on two workers, each round still one step on the
    batch); ``move``: live rebalancing on, ``scale_ps([0, 2])`` after 6 applied rounds, PS 1
    killed as its first move starts; ``epoch``: PS 1 killed as ``fit`` joins at the end of
    epoch 1 (the engine idle: no step or apply meets the death). ``flavour`` ``keras3``: the
    same model in Keras 3 (``tf_hetero.keras3``), its local replay too."""
    import numpy as np
    import tensorflow as tf

    keras3 = flavour == "keras3"
    keras = tf_hetero.models.keras_module(keras3)
    if keras3:
        tf_hetero.keras3.enable()

    # One batch of 8 samples, a sized strategy's granule: a task reads whole copies of it
    # whatever its share (H-PS sizes shares by measured speed). With 16 samples a task
    # read 8-sample halves of it, and a round of shares (2, 1, 3) weighed one half twice as
    # much as the other: measured, under the full suite's load only, 2 of 3 runs inexact.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 8)).astype("float32")
    y = rng.integers(0, 3, size=(8,)).astype("int64")

    def make_model():
        first = ([keras.Input((8,)), keras.layers.Dense(16, activation="tanh")] if keras3 else
                 [keras.layers.Dense(16, activation="tanh", input_shape=(8,))])
        model = keras.Sequential(first + [keras.layers.Dense(3)])
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    def dataset_fn(_):
        return tf.data.Dataset.from_tensors((x, y)).repeat()

    name, _, workers = name.partition(":")  # e.g. "asp:1": ASP on one worker (exact)
    with tf_hetero.LocalCluster(int(workers or WORKERS), 3, processes=True) as cluster:
        from tf_hetero.strategies import registry

        # A stalled recovery ends in the stall error, which says what the engine waited on.
        strategy = registry.make(name, cluster.resolver, stall_timeout_s=40,
                                 **({"rebalance": True} if kills == "move" else {}))
        strategy.scale_ps(2)  # PS 2 stands by
        strategy.set_failover(4)
        with strategy.scope():
            model = make_model()
        initial = [w.copy() for w in model.get_weights()]
        tf_hetero.emulate(model, "base_ms=40", strategy=strategy)
        engine = strategy.engine
        def placed():  # a Keras 3 variable's device is its backing tf.Variable's
            return sorted({getattr(v, "device", None) or v.value.device
                           for v in model.trainable_variables})

        devices = placed()

        def applied():  # rounds applied (ASP: steps)
            if engine is None:
                return strategy.coordinator.failover.steps.run
            return sum(r.applied > 0 for r in engine.rounds)

        killed, killed_workers, scaling = [], [], []
        if kills == "apply":  # the kill happens on the apply thread: no killer thread
            applier = strategy.coordinator.applier
            submit = applier.submit

            def submit_killing(round_id, fn, args):
                if not killed and applied() >= 6:
                    def kill_then_apply(*a):
                        if not killed:
                            cluster.kill("ps", 1)
                            killed.append(1)
                        return fn(*a)
                    return submit(round_id, kill_then_apply, args)
                return submit(round_id, fn, args)

            applier.submit = submit_killing

        if kills == "move":  # the kill happens on fit's thread, as the move starts
            rebalancer = strategy.rebalancer
            move = rebalancer.move

            def move_killing(variable, dst, optimizers=()):
                if scaling and not killed:  # not a move of the rebalancer's own before
                    cluster.kill("ps", 1)
                    killed.append(1)
                return move(variable, dst, optimizers)

            rebalancer.move = move_killing

        if kills == "epoch":  # PS 1 killed as fit's epoch-end join returns: nothing runs
            coordinator = strategy.coordinator
            join = coordinator.join

            def join_killing():
                result = join()
                if not killed and applied() >= 6:
                    cluster.kill("ps", 1)
                    killed.append(1)
                    join()  # as Keras's next join would: the death is met here
                return result

            coordinator.join = join_killing

        def kill_later():
            if kills in ("apply", "epoch"):
                return
            if kills == "rejoin":  # PS 1 dies, comes back at an epoch's end, then takes PS 2's
                when(lambda: applied() >= 6)
                cluster.kill("ps", 1)
                killed.append(1)
                failover = strategy.coordinator.failover
                when(lambda: failover.events, timeout=60)
                cluster.restart("ps", 1)
                when(lambda: failover.rejoined, timeout=60)
                now = applied()
                when(lambda: applied() >= now + 3)
                cluster.kill("ps", 2)
                killed.append(2)
                return
            if kills == "move":
                when(lambda: applied() >= 6)
                scaling.append(True)
                strategy.scale_ps([0, 2])
                return
            when(lambda: applied() >= 6)
            if kills == "worker":
                cluster.kill("worker", 1)
                killed_workers.append(1)
            cluster.kill("ps", 1)
            killed.append(1)
            if kills == "2":
                when(lambda: strategy.coordinator.failover.events, timeout=60)
                now = applied()
                when(lambda: applied() >= now + 6)
                cluster.kill("ps", 0)
                killed.append(0)

        killer = threading.Thread(target=kill_later, daemon=True)
        killer.start()
        error, losses = None, None
        try:
            data = dataset_fn if keras3 else keras.utils.experimental.DatasetCreator(dataset_fn)
            history = model.fit(data, epochs=8 if kills == "rejoin" else 2, steps_per_epoch=30,
                                verbose=0)
            losses = history.history["loss"]
        except Exception as e:  # noqa: BLE001 - the scenario reports what fit raised
            import traceback

            error = dict(type=type(e).__name__, message=str(e)[:2000],
                         where=traceback.format_exc()[-3000:])
        killer.join(timeout=10)
        failover = strategy.coordinator.failover
        if error is not None:  # the weights may be gone with the PS: report what fit raised
            with open(out, "w") as f:
                json.dump(dict(error=error, killed=killed, killed_workers=killed_workers,
                               events=failover.events, rejoined=failover.rejoined), f)
            return
        iterations = int(model.optimizer.iterations.numpy())
        final = model.get_weights()
        local = make_model()
        local.set_weights(initial)
        for _ in range(iterations):
            local.train_on_batch(x, y)
        diffs = [float(np.max(np.abs(a - b))) for a, b in zip(final, local.get_weights())]
        diff = max(diffs)
        # Which variables are off, and where they live (a failure's first clue: those of
        # the surviving PS, or those created again on the target).
        where = [(getattr(v, "path", None) or v.name, getattr(v, "device", None) or v.value.device)
                 for v in model.weights]
        scale = max(float(np.max(np.abs(b))) for b in local.get_weights())
        rounds = engine.rounds if engine is not None else []
        tasks = [t for r in rounds for t in r.tasks]
        result = dict(error=error, killed=killed, killed_workers=killed_workers, losses=losses,
                      events=failover.events, copies=failover.copies,
                      rejoined=failover.rejoined,
                      live_workers=sorted(engine.live_workers) if engine is not None else None,
                      tasks_done=sum(t.state == "done" for t in tasks),
                      copy_bytes=failover.copy.nbytes if failover.copy else 0,
                      copy_ms=1e3 * float(np.median(failover.copy_s)) if failover.copy_s else None,
                      iterations=iterations,
                      applied=applied(),
                      # per round: micro-batches applied (-1: none), abandoned, tasks
                      rounds=[(r.applied, r.abandoned, len(r.tasks)) for r in rounds],
                      sizes=[[t.size for t in r.tasks] for r in rounds],  # shares per round
                      devices_before=devices,
                      devices_after=placed(),
                      max_diff=diff, max_weight=scale,
                      diffs=[(name, device, d) for (name, device), d in zip(where, diffs)])
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker_scenario(sys.argv[2])
    elif sys.argv[1] == "failover":
        failover_scenario(sys.argv[2], *sys.argv[3:])
    elif sys.argv[1] == "ps":
        ps_scenario(sys.argv[2], sys.argv[3], sys.argv[4:] == ["keras3"])
    else:
        resume_scenario(sys.argv[2], sys.argv[3], sys.argv[4:] == ["keras3"])
    sys.stdout.flush()
    os._exit(0)  # skip TF teardown against stopped servers
