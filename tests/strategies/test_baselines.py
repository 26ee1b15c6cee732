"""The baseline strategies (BSP, backup workers, SSP, ASP) and EPSP under real ``model.fit``
on the shared in-process cluster (3 workers, 2 PS).

Every test builds its own strategy on the shared cluster (a strategy reconnects the process to
the cluster; the cluster's servers are reused)."""

from __future__ import annotations

import collections
import csv
import os

import numpy as np
import pytest

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete

from support import fit, keras3 as k3
from support.fit import B, N, ROUNDS

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("opt", fit.OPTIMIZERS)
def test_bsp_rounds_equal_large_batch_steps_of_the_same_optimizer(cluster, data, opt):
    import tf_keras as keras

    import tf_hetero

    make = fit.optimizers()[opt]
    x, y = data
    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = fit.model()
        model.compile(make(), fit.loss())
    model.fit(keras.utils.experimental.DatasetCreator(fit.per_worker_fn(x, y)), epochs=1,
              steps_per_epoch=N * ROUNDS, verbose=0)
    reference = fit.model()
    reference.compile(make(), fit.loss())
    xs, ys = x.reshape(ROUNDS, N, B, 5), y.reshape(ROUNDS, N, B)
    for k in range(ROUNDS):
        reference.train_on_batch(xs[k].reshape(N * B, 5), ys[k].reshape(N * B))
    if getattr(reference.optimizer, "use_ema", False):  # fit() ends by swapping in the EMA
        reference.optimizer.finalize_variable_values(reference.trainable_variables)
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert int(model.optimizer.iterations.numpy()) == ROUNDS
    assert [r.applied for r in strategy.engine.rounds] == [N] * ROUNDS


def test_bsp_applies_every_task_exactly_once_with_a_slow_worker(cluster):
    import tf_hetero

    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    fit.fit_with_profile(cluster, strategy, "slow=2:3;base_ms=30", steps=30)
    engine = strategy.engine
    fit.assert_every_task_applied_once_or_dropped(engine, 30)
    assert all(r.applied == N for r in engine.rounds)
    assert strategy.monitor.summary()["dropped_tasks"] == 0


def test_a_step_that_meets_a_transient_ps_failure_runs_again_in_its_round(cluster, monkeypatch):
    """TF deems an UnavailableError from a PS transient (up to 3 per PS) and puts the closure
    back on its queue without telling the worker's failure hook (cc ``wait_on_failure``). The
    engine must not count that attempt as the task's end: it runs again and its round applies
    all N gradients. (Counted as finished, round 0 closed on two, and the rerun was dropped.)"""
    import tensorflow as tf
    import tf_hetero
    from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

    from tf_hetero.strategies.runtime.tags import ClosureKind, tag_of

    execute_on, failed = cc.Closure.execute_on, []

    def once(closure, worker):
        tag = tag_of(closure)
        if not failed and worker.worker_index == 0 and tag is not None \
                and tag.kind == ClosureKind.TASK:
            failed.append(tag.task)
            raise tf.errors.UnavailableError(None, None, (
                "Socket closed\nAdditional GRPC error information from remote target "
                "/job:ps/replica:0/task:0 while calling /tensorflow.eager.EagerService/Enqueue"))
        return execute_on(closure, worker)

    monkeypatch.setattr(cc.Closure, "execute_on", once)
    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    # Worker 0 (which reruns it: the others are busy) is slow: the round cannot close on
    # the other two before the rerun wrote its gradient by luck.
    fit.fit_with_profile(cluster, strategy, "slow=0:5;base_ms=10", steps=2 * N)
    engine = strategy.engine
    assert failed and failed[0].state == "done"  # the task of the failed attempt ran again
    fit.assert_every_task_applied_once_or_dropped(engine, 2 * N)
    assert [r.applied for r in engine.rounds] == [N, N]
    assert strategy.monitor.summary()["dropped_tasks"] == 0


def test_a_fit_builds_its_step_closure_once_and_copies_it_for_every_other_task(cluster,
                                                                              monkeypatch):
    """Every task of a fit runs the same step on the same argument objects: its closure is
    built once (tracing cache lookup, output signature) and copied for the others
    (runtime/closures.py). The copies train: every task applied once, none lost."""
    from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

    import tf_hetero

    built = []
    init = cc.Closure.__init__

    def counting_init(self, function, *args, **kwargs):
        built.append(function)
        init(self, function, *args, **kwargs)

    monkeypatch.setattr(cc.Closure, "__init__", counting_init)
    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    fit.fit_with_profile(cluster, strategy, "base_ms=5", steps=18, epochs=2)
    steps = [e.accumulate_fn for e in strategy.coordinator.tracer.entries.values()
             if e.is_train]
    assert len(steps) == 1
    # The closure the trace keeps, and one per epoch (each epoch's iterator is a new object
    # only if Keras makes one): never one per task.
    assert 1 <= built.count(steps[0]) <= 3, built.count(steps[0])
    fit.assert_every_task_applied_once_or_dropped(strategy.engine, 36)
    assert all(r.applied == N for r in strategy.engine.rounds)


def test_backup_workers_apply_first_tasks_and_drop_the_late_one(cluster):
    import tf_hetero

    strategy = tf_hetero.BackupWorkerStrategy(cluster.resolver, backups=1)
    fit.fit_with_profile(cluster, strategy, "slow=2:4;base_ms=30", steps=40)
    engine = strategy.engine
    fit.assert_every_task_applied_once_or_dropped(engine, 40)
    dropped = [t for r in engine.rounds for t in r.tasks if t.state == "dropped"]
    # Round 0's tasks all include tracing (~1 s, any order); after that the slow one loses.
    assert dropped and all(t.worker == 2 for t in dropped if t.round > 0)
    assert all(2 not in r.lanes for r in engine.rounds[1:] if any(t in dropped for t in r.tasks))
    summary = strategy.monitor.summary()
    assert summary["applied_tasks"] == sum(r.applied for r in engine.rounds)
    assert summary["dropped_tasks"] == len(dropped)


def test_ssp_keeps_every_worker_within_the_staleness_bound(cluster):
    import tf_hetero

    s = 2
    strategy = tf_hetero.SSPStrategy(cluster.resolver, staleness=s)
    fit.fit_with_profile(cluster, strategy, "slow=2:4;base_ms=30", steps=36)
    tasks = sorted(strategy.monitor.tasks, key=lambda t: t.start)
    assert len(tasks) == 36
    for t in tasks:
        finished = [sum(1 for u in tasks if u.worker == w and u.end <= t.start) for w in range(N)]
        assert finished[t.worker] - min(finished) <= s
    counts = collections.Counter(t.worker for t in tasks)
    assert counts[2] < counts[0]  # the slow worker still runs fewer tasks
    assert strategy.monitor.summary()["max_staleness"] >= 1


def test_asp_applies_each_task_at_once_and_records_staleness(cluster):
    import tf_hetero

    strategy = tf_hetero.ASPStrategy(cluster.resolver)
    model, _ = fit.fit_with_profile(cluster, strategy, "slow=2:3;base_ms=20", steps=30)
    summary = strategy.monitor.summary()
    assert summary["tasks"] == summary["applied_tasks"] == 30
    assert int(model.optimizer.iterations.numpy()) == 30
    assert summary["max_staleness"] >= 1


def test_standard_callbacks_and_monitor_logs_work_under_bsp(cluster, tmp_path):
    import tf_keras as keras

    import tf_hetero

    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    csv_path = tmp_path / "log.csv"
    callbacks = [
        tf_hetero.MonitorLogs(strategy),
        keras.callbacks.CSVLogger(str(csv_path)),
        keras.callbacks.TensorBoard(str(tmp_path / "tb")),
        keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpt" / "weights"), save_weights_only=True),
        keras.callbacks.BackupAndRestore(str(tmp_path / "backup")),
        keras.callbacks.EarlyStopping(monitor="loss", patience=5),
    ]
    model, history = fit.fit_with_profile(cluster, strategy, "base_ms=5", steps=12, epochs=2,
                                       callbacks=callbacks)
    assert len(history.history["loss"]) == 2
    assert history.history["tf_hetero/rounds"] == [4, 4]
    rows = list(csv.DictReader(open(csv_path)))
    assert len(rows) == 2 and float(rows[1]["tf_hetero/applied_tasks"]) == 12
    assert any(f.startswith("events") for _, _, fs in os.walk(tmp_path / "tb") for f in fs)
    assert (tmp_path / "ckpt").exists()
    assert int(model.optimizer.iterations.numpy()) == 8


def test_evaluate_runs_unchanged_under_bsp(cluster):
    import tf_keras as keras

    import tf_hetero

    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    model, _ = fit.fit_with_profile(cluster, strategy, "base_ms=5", steps=6)
    test = tf_hetero.data.load("digits", "test")
    result = model.evaluate(
        keras.utils.experimental.DatasetCreator(
            tf_hetero.data.dataset_fn(batch_size=16, data=test)), steps=5, verbose=0,
        return_dict=True)
    assert 0.0 <= result["accuracy"] <= 1.0
    assert len(strategy.engine.rounds) == 2  # evaluation tasks did not enter rounds


def test_backup_worker_strategy_rejects_impossible_backups(cluster):
    import tf_hetero

    with pytest.raises(ValueError, match=r"backups=3\) with 3 workers: need an integer from 0 to 2"):
        tf_hetero.BackupWorkerStrategy(cluster.resolver, backups=3)
    with pytest.raises(ValueError, match=r"staleness=-1"):
        tf_hetero.SSPStrategy(cluster.resolver, staleness=-1)


# ------------------------------------------------------------------------------- EPSP
def _copies(engine):
    return [t for r in engine.rounds for t in r.tasks + r.copies]


def _assert_each_logical_task_applied_at_most_once(engine):
    for r in engine.rounds:
        if r.folds:  # folded lanes add their micro-batches
            assert r.applied > sum(r.lanes.values())
        else:
            assert r.applied == sum(r.lanes.values())
        for t in r.tasks:
            applied = [c for c in (t, t.twin) if c is not None and c.state in ("done", "folded")]
            assert len(applied) <= 1, (t, t.twin)  # a transferred task counts once


@pytest.mark.parametrize("keras3", [False, True], ids=["tf_keras", "keras3"])
def test_epsp_enforced_without_stragglers_equals_large_batch_sgd(cluster, data, keras3):
    """Tasks are pulled, so which batches a round holds is read back from the engine. (A Keras
    3 model too: the same layers and seeded initializers, so the same tf_keras reference.)"""
    import tf_keras as keras

    import tf_hetero

    x, y = data
    # No transfer: a copy would read a batch of its own worker (the case is covered below).
    strategy = tf_hetero.EPSPStrategy(cluster.resolver, sync="enforced", transfer_factor=None,
                                      round_tasks=N)
    if keras3:
        import keras as keras_3

        tf_hetero.keras3.enable()
        with strategy.scope():
            model = k3.model(1)
            model.compile(keras_3.optimizers.SGD(0.1, momentum=0.9), k3.loss())
    else:
        with strategy.scope():
            model = fit.model()
            model.compile(keras.optimizers.SGD(0.1, momentum=0.9), fit.loss())
    # Every worker reads the same stream; its j-th task uses block j.
    blocks_x = x.reshape(ROUNDS * N, B, 5)
    blocks_y = y.reshape(ROUNDS * N, B)

    def same_stream(ctx):
        import tensorflow as tf

        return without_autotune(tf.data.Dataset.from_tensor_slices((blocks_x, blocks_y)))

    model.fit(same_stream if keras3 else keras.utils.experimental.DatasetCreator(same_stream),
              epochs=1, steps_per_epoch=N * ROUNDS, verbose=0)
    engine = strategy.engine
    # Every task that ran consumed a batch of its worker, applied or not.
    order = sorted((t for t in _copies(engine) if t.worker is not None and not t.stale),
                   key=lambda t: t.t_start)
    seen = collections.Counter()
    batch_of = {}
    for t in order:
        batch_of[id(t)] = seen[t.worker]
        seen[t.worker] += 1
    reference = fit.model()
    reference.compile(keras.optimizers.SGD(0.1, momentum=0.9), fit.loss())
    for r in engine.rounds:
        idx = [batch_of[id(t)] for t in r.tasks if t.state == "done"]
        reference.train_on_batch(np.concatenate([blocks_x[i] for i in idx]),
                                 np.concatenate([blocks_y[i] for i in idx]))
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert int(model.optimizer.iterations.numpy()) == len(engine.rounds) == ROUNDS


def test_epsp_enforced_leaves_a_projected_straggler_out_and_logs_why(cluster):
    import tf_hetero

    strategy = tf_hetero.EPSPStrategy(cluster.resolver, sync="enforced", window=3, round_tasks=N,
                                      probe_every=4)
    fit.fit_with_profile(cluster, strategy, "slow=2:4;base_ms=30", steps=45)
    engine = strategy.engine
    infos = [r.info for r in engine.rounds]
    assert any(2 in i["stragglers"] and 2 not in i["participants"] for i in infos)
    assert any(i["probe"] and 2 in i["participants"] for i in infos)  # it is probed again
    assert all(i["projection"].keys() == {0, 1, 2} for i in infos)
    _assert_each_logical_task_applied_at_most_once(engine)
    s = strategy.monitor.summary()
    assert s["worker2_straggler_rounds"] > 0
    assert s["worker2_rounds_taking_part"] < len(engine.rounds)


def test_epsp_transfers_long_tasks_and_applies_only_the_first_copy(cluster):
    import tf_hetero

    strategy = tf_hetero.EPSPStrategy(cluster.resolver, sync="enforced", transfer_factor=1.5,
                                      round_tasks=N)
    fit.fit_with_profile(cluster, strategy, "straggle=0.3x6;base_ms=20;seed=3", steps=45)
    engine = strategy.engine
    transfers = [e for e in strategy.monitor.events if e[1] == "transfer"]
    assert transfers
    twins = [t for t in _copies(engine) if t.twin is not None]
    assert twins and all(t.state in ("done", "dropped") for t in twins)
    _assert_each_logical_task_applied_at_most_once(engine)
    for r in engine.rounds:  # a winning copy's extra lane is read, the loser's never
        assert all(lane < N or any(c.lane == lane and c.state == "done" for c in r.copies)
                   for lane in r.lanes)


@pytest.mark.parametrize("late", ["fold", "drop"])
def test_epsp_slack_folds_or_drops_late_gradients(cluster, late):
    import tf_hetero

    strategy = tf_hetero.EPSPStrategy(cluster.resolver, sync="slack", late=late, quorum=0.6, round_tasks=N,
                                      transfer_factor=None)
    fit.fit_with_profile(cluster, strategy, "slow=2:4;base_ms=30", steps=45)
    engine = strategy.engine
    s = strategy.monitor.summary()
    folded = [t for t in _copies(engine) if t.state == "folded"]
    if late == "fold":
        # The slow worker's tasks are late every time; a fast one's only when the quorum
        # closed the round while it was still running.
        assert s["folded_lanes"] > 0 and any(t.worker == 2 for t in folded)
        stale = [t.staleness for t in strategy.monitor.tasks if t.round is not None and
                 t.staleness > 0]
        assert stale and min(stale) >= 1
    else:
        assert s["folded_lanes"] == 0 and not folded and s["dropped_tasks"] > 0
    # Every task ends applied (done or folded) or dropped, exactly once.
    assert all(t.state in ("done", "dropped", "folded") for t in _copies(engine))
    assert s["tasks"] == len(_copies(engine))


def test_epsp_strategy_rejects_impossible_settings_before_connecting(cluster):
    import tf_hetero

    with pytest.raises(ValueError, match=r"EPSPStrategy\(sync='fast'\): use 'enforced' or 'slack'"):
        tf_hetero.EPSPStrategy(cluster.resolver, sync="fast")
    with pytest.raises(ValueError, match=r"EPSPStrategy\(late='keep'\): use 'fold' or 'drop'"):
        tf_hetero.EPSPStrategy(cluster.resolver, late="keep")
    with pytest.raises(ValueError, match=r"round_tasks=0\): need an integer >= 1 \(default: "
                                         r"the number of workers, 3\)"):
        tf_hetero.EPSPStrategy(cluster.resolver, round_tasks=0)


def test_bsp_with_several_steps_per_task_equals_large_batch_steps(cluster):
    """steps_per_execution=2: a task is 2 micro-batches; a round averages all 2N of them."""
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    k, rounds = 2, 3
    rng = np.random.default_rng(1)
    x = rng.normal(size=(rounds * N * k * B, 5)).astype("float32")
    y = rng.integers(0, 3, rounds * N * k * B)

    def fn(ctx):
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        xs = tf.gather(tf.reshape(tf.constant(x), (rounds, N, k, B, 5)), w, axis=1)
        ys = tf.gather(tf.reshape(tf.constant(y), (rounds, N, k, B)), w, axis=1)
        ds = tf.data.Dataset.from_tensor_slices((tf.reshape(xs, (rounds * k, B, 5)),
                                                 tf.reshape(ys, (rounds * k, B))))
        return without_autotune(ds)

    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = fit.model()
        model.compile(keras.optimizers.Adam(0.01), fit.loss(), steps_per_execution=k)
    model.fit(keras.utils.experimental.DatasetCreator(fn), epochs=1,
              steps_per_epoch=rounds * N * k, verbose=0)
    reference = fit.model()
    reference.compile(keras.optimizers.Adam(0.01), fit.loss())
    for r in range(rounds):
        reference.train_on_batch(x.reshape(rounds, -1, 5)[r], y.reshape(rounds, -1)[r])
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert [r.applied for r in strategy.engine.rounds] == [N * k] * rounds
