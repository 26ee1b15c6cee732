"""Failure scenarios on a multi-process LocalCluster; prints one JSON line of results.

    python failures.py worker OUT.json   # kill worker 1 mid-fit, then restart it
    python failures.py ps OUT.json CKPT      # kill the PS at epoch 1's end; BackupAndRestore in CKPT
    python failures.py resume OUT.json CKPT  # a new cluster; fit resumes from CKPT

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


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker_scenario(sys.argv[2])
    elif sys.argv[1] == "ps":
        ps_scenario(sys.argv[2], sys.argv[3], sys.argv[4:] == ["keras3"])
    else:
        resume_scenario(sys.argv[2], sys.argv[3], sys.argv[4:] == ["keras3"])
    sys.stdout.flush()
    os._exit(0)  # skip TF teardown against stopped servers
