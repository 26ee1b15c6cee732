"""Per-worker batch sizes (H-PS's default) under real ``model.fit`` on the shared in-process
cluster (3 workers, 2 PS): one task per worker per round, sized by speed, and the round's
update exactly one optimizer step on the concatenated global batch."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete

from support import small
from support.fit import record_copies_to_chief

pytestmark = pytest.mark.cluster

N, BATCH, GRANULE = 3, 8, 4
SAMPLES = 96  # per worker; the workers' data repeat
#: Memory budgets (samples) that cap the slow worker 2 at one granule: every round's sizes
#: are uneven whatever the measured speeds. Speeds alone made them uneven too, but a stall of
#: the in-process cluster in the first measured round (all workers' times inflated alike)
#: kept the split even for the rest of a short fit (CI, 2026-11-26: four rounds of 2/2/2).
UNEVEN = [N * BATCH, N * BATCH, GRANULE]


def _optimizer(name):
    import tf_keras as keras

    return {"sgd": lambda: keras.optimizers.SGD(0.1),
            "momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
            "adam": lambda: keras.optimizers.Adam(0.01)}[name]()


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(N, SAMPLES, 5)).astype("float32"),
            rng.integers(0, 3, (N, SAMPLES)))


def _fit(strategy, rounds, optimizer="sgd", profile="slow=2:3;base_ms=40", callbacks=(),
         **fit_kw):
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    x, y = _data()

    def fn(ctx):  # worker w reads its own rows, in order, in batches of BATCH, forever
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        ds = tf.data.Dataset.from_tensor_slices((tf.gather(tf.constant(x), w),
                                                 tf.gather(tf.constant(y), w)))
        return without_autotune(ds.repeat().batch(BATCH, drop_remainder=True))

    with strategy.scope():
        model = small.model()
        model.compile(_optimizer(optimizer), small.loss())
    if profile:
        tf_hetero.emulate(model, profile, strategy=strategy)
    history = model.fit(keras.utils.experimental.DatasetCreator(fn), verbose=0,
                        callbacks=list(callbacks),
                        **{"epochs": 1, "steps_per_epoch": rounds * N, **fit_kw})
    model.tf_hetero_history = history
    return model, x, y


def _reference(engine, x, y, optimizer):
    """One step of ``optimizer`` per round on the granules each worker's task read."""
    reference = small.model()
    reference.compile(_optimizer(optimizer), small.loss())
    position = [0] * N  # samples each worker has read
    for r in engine.rounds:
        xs, ys = [], []
        for t in sorted(r.tasks, key=lambda t: t.worker):
            rows = [(position[t.worker] + i) % SAMPLES for i in range(t.size * GRANULE)]
            position[t.worker] += t.size * GRANULE
            xs.append(x[t.worker, rows])
            ys.append(y[t.worker, rows])
        reference.train_on_batch(np.concatenate(xs), np.concatenate(ys))
    return reference.get_weights()


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_sized_rounds_equal_one_step_on_the_global_batch(cluster, optimizer):
    import tf_hetero

    rounds = 6
    strategy = tf_hetero.HPSStrategy(cluster.resolver, granularity=GRANULE, memory_budget=UNEVEN)
    model, x, y = _fit(strategy, rounds, optimizer)
    engine = strategy.engine
    units = N * BATCH // GRANULE
    assert len(engine.rounds) == rounds
    for r in engine.rounds:  # one task (one closure) per worker, sizes adding up to BSP's batch
        assert sorted(t.worker for t in r.tasks) == list(range(N))
        assert sum(t.size for t in r.tasks) == units and r.applied == units
        assert {t.worker: t.size for t in r.tasks}[2] == 1  # uneven: the weighting matters
    for got, want in zip(model.get_weights(), _reference(engine, x, y, optimizer)):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert strategy.monitor.summary()["pushes"] == rounds * N  # one push per worker per round


def test_validation_reads_whole_batches_and_leaves_the_rounds_alone(cluster):
    """``fit``'s validation and ``evaluate`` under a sized strategy read whole batches, and
    the validation data's batch (twice the training batch here) does not become the rounds'
    global batch. Re-batched into granules, validation read the first granule of each batch
    and the rounds after epoch 1 took twice the samples."""
    import tensorflow as tf

    import tf_hetero

    rounds = 6
    strategy = tf_hetero.HPSStrategy(cluster.resolver, granularity=GRANULE, memory_budget=UNEVEN)
    rng = np.random.default_rng(1)
    xv = rng.normal(size=(2 * BATCH, 5)).astype("float32")
    yv = rng.integers(0, 3, 2 * BATCH)
    val = tf.data.Dataset.from_tensors((xv, yv)).repeat()  # every batch the same
    model, x, y = _fit(strategy, rounds, epochs=2, steps_per_epoch=rounds * N // 2,
                       validation_data=val, validation_steps=1)
    engine = strategy.engine
    assert len(engine.rounds) == rounds
    assert [sum(t.size for t in r.tasks) for r in engine.rounds] == [N * BATCH // GRANULE] * rounds
    for got, want in zip(model.get_weights(), _reference(engine, x, y, "sgd")):
        np.testing.assert_allclose(got, want, atol=1e-5)
    plain = small.model()
    plain.compile(_optimizer("sgd"), small.loss())
    plain.set_weights(model.get_weights())
    want = plain.evaluate(xv, yv, batch_size=2 * BATCH, verbose=0)
    np.testing.assert_allclose(model.tf_hetero_history.history["val_loss"][-1], want, atol=1e-5)
    np.testing.assert_allclose(model.evaluate(val, steps=1, verbose=0), want, atol=1e-5)


def test_a_dataset_of_another_batch_is_said_and_whole_batches_leave_the_rounds_alone(
        cluster, capsys):
    """Outside ``whole_batches()`` a dataset of another batch sets the rounds' global batch,
    and says so in one line; inside it, it is left in whole batches and changes nothing."""
    import tensorflow as tf

    import tf_hetero

    strategy = tf_hetero.HPSStrategy(cluster.resolver, granularity=GRANULE)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    rows = tf.data.Dataset.from_tensor_slices(np.zeros((64, 5), "float32")).repeat()

    def distribute(batch):
        dataset = strategy.experimental_distribute_dataset(rows.batch(batch, drop_remainder=True))
        coordinator.create_per_worker_dataset(dataset)
        return dataset.element_spec.shape[0]

    capsys.readouterr()
    assert distribute(BATCH) == GRANULE and strategy.dataset_batch == BATCH
    assert "was distributed after" not in capsys.readouterr().out
    with strategy.whole_batches():
        assert distribute(2 * BATCH) == 2 * BATCH  # whole batches
    assert strategy.dataset_batch == BATCH and "was distributed after" not in capsys.readouterr().out
    assert distribute(2 * BATCH) == GRANULE and strategy.dataset_batch == 2 * BATCH
    out = capsys.readouterr().out
    assert f"a dataset of batch {2 * BATCH} was distributed after one of batch {BATCH}" in out


def test_sized_shares_follow_measured_speed(cluster):
    """Without budgets, the 4x slow worker gets the smallest share once measured, and the
    shares follow the measured times (a worker measured slower never gets more). Judged on
    the last rounds: a stall of the whole in-process cluster early in the fit inflates every
    worker's time alike and evens the split for a few rounds (the smoothing's memory). A
    fast worker can be measured slow on this 2-core host too (one CI run: 26, 54 and 105 ms
    per unit, shares 4, 1, 1): the slow worker's share may then tie another's at one unit."""
    import tf_hetero

    strategy = tf_hetero.HPSStrategy(cluster.resolver, granularity=GRANULE)
    _fit(strategy, 10, profile="slow=2:4;base_ms=40")
    last = [(r.info["sizes"], r.info["unit_ms"]) for r in strategy.engine.rounds[-3:]]
    for sizes, unit_ms in last:
        assert sizes[2] == min(sizes.values()) < max(sizes.values()), last
        by_time = sorted(sizes, key=lambda w: unit_ms[w])
        assert [sizes[w] for w in by_time] == sorted(sizes.values(), reverse=True), last


def test_epsp_pioneers_take_a_left_out_stragglers_share_in_their_one_task(cluster, monkeypatch):
    """... and the fit's last step, absorbed, ends with a pioneer's result, which that
    worker's thread copies to the chief (``fit`` holds it for its logs; a worker lost before
    ``join`` would otherwise take them along)."""
    import tf_hetero

    copies, held = record_copies_to_chief(monkeypatch)  # held: fit's, at join
    rounds = 10
    strategy = tf_hetero.EPSPStrategy(cluster.resolver, granularity=GRANULE, window=3,
                                      probe_every=100, transfer_factor=None)
    progress = tf_hetero.Progress(interval_s=60, stream=io.StringIO())
    model, x, y = _fit(strategy, rounds, "momentum", profile="slow=2:4;base_ms=40",
                       callbacks=[progress])
    engine = strategy.engine
    units = N * BATCH // GRANULE
    out = [r for r in engine.rounds if 2 in r.info.get("stragglers", ())]
    assert out, [r.info for r in engine.rounds]
    for r in out:  # the straggler sits out; the two pioneers read the whole global batch
        assert sorted(t.worker for t in r.tasks) == [0, 1]
        assert sum(t.size for t in r.tasks) == units == r.applied
        assert len(r.absorbed) == 1  # its step is covered: no extra round for it
    # The fit's 30 steps read 30 batches: a round covers N steps however many workers split
    # it (with the straggler's step left over, 10 rounds' worth of steps made 14 rounds).
    assert len(engine.rounds) == rounds and out[-1] is engine.rounds[-1]
    assert np.isfinite(model.history.history["loss"][-1])  # its last step was absorbed
    assert len(held) == 1 and any(  # and copied by a worker's thread, before join
        r is held[0] for r, thread in copies if thread.startswith("WorkerClosure")), copies
    assert f"tasks {rounds * N}/{rounds * N}" in progress.line()  # absorbed steps are done
    for r in engine.rounds:
        assert len({t.worker for t in r.tasks}) == len(r.tasks)  # one closure per worker
    for got, want in zip(model.get_weights(), _reference(engine, x, y, "momentum")):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_overlapped_rounds_run_while_the_last_apply_lands_and_apply_every_sample_once(cluster):
    """``overlap=True``: a round opens when the previous one closes (before its apply has
    landed), never two rounds ahead; every granule is applied once; some updates are
    computed on the model one update old (staleness 1), which the monitor records."""
    import tf_hetero

    rounds = 8
    strategy = tf_hetero.HPSStrategy(cluster.resolver, granularity=GRANULE, overlap=True)
    model, _, _ = _fit(strategy, rounds, "momentum", profile="slow=2:3;base_ms=20")
    engine = strategy.engine
    units = N * BATCH // GRANULE
    assert len(engine.rounds) == rounds
    assert all(r.applied == units == sum(t.size for t in r.tasks) for r in engine.rounds)
    assert int(model.optimizer.iterations.numpy()) == rounds
    early = [b for a, b in zip(engine.rounds, engine.rounds[1:]) if b.t_open < a.t_applied]
    assert early, "no round opened before the previous apply landed"
    for a, b in zip(engine.rounds, engine.rounds[2:]):
        assert b.t_open >= a.t_applied  # two slots: never two rounds ahead
    stale = [t.staleness for t in strategy.monitor.tasks]
    assert max(stale) == 1


def test_sizes_off_the_even_split_would_not_match(cluster):
    """The reference is sensitive to the sizes: the same fit checked as if every task had
    read an even share fails (so the test above would catch a wrong size or weighting)."""
    import tf_hetero

    strategy = tf_hetero.HPSStrategy(cluster.resolver, granularity=GRANULE, memory_budget=UNEVEN)
    model, x, y = _fit(strategy, 4)
    engine = strategy.engine
    for r in engine.rounds:
        for t in r.tasks:
            t.size = N * BATCH // GRANULE // N
    want = _reference(engine, x, y, "sgd")
    assert max(np.abs(g - w).max() for g, w in zip(model.get_weights(), want)) > 1e-3


def test_emulated_device_time_follows_the_samples_a_task_reads(cluster):
    """Memory budgets pin the sizes to 1, 2 and 3 granules on equal workers: with device
    time per sample, the profile gives their tasks 50, 100 and 150 ms (one batch, 2
    granules: 100 ms); with a fixed time per step it would give each 100. The emulation's
    own count of what it gave (not wall time, which load stretches); each task lasted at
    least that."""
    import tf_hetero

    strategy = tf_hetero.HPSStrategy(cluster.resolver, granularity=GRANULE,
                                     memory_budget=[GRANULE, 2 * GRANULE, 3 * GRANULE])
    model, _, _ = _fit(strategy, 6, profile="base_ms=100")
    tasks = [t for r in strategy.engine.rounds for t in r.tasks]
    assert {t.worker: t.size for t in tasks} == {0: 1, 1: 2, 2: 3}
    given = model._tf_hetero_device.budget_ms_per_task()
    assert given == pytest.approx([50.0, 100.0, 150.0], abs=0.01), given
    assert all(t.duration >= 0.95 * given[t.worker] / 1e3 for t in tasks)


def test_sized_strategy_settings_are_checked_before_connecting(cluster):
    import tf_hetero

    with pytest.raises(ValueError, match=r"granularity=0"):
        tf_hetero.HPSStrategy(cluster.resolver, granularity=0)
    with pytest.raises(ValueError, match=r"global_batch=20.*multiple of granularity=8"):
        tf_hetero.HPSStrategy(cluster.resolver, global_batch=20)
    with pytest.raises(ValueError, match=r"memory budgets hold 24 samples.*global_batch=48"):
        tf_hetero.HPSStrategy(cluster.resolver, global_batch=48, memory_budget=8)
    with pytest.raises(ValueError, match=r"not both"):
        tf_hetero.HPSStrategy(cluster.resolver, global_batch=48, round_tasks=6)


@pytest.mark.parametrize("per_execution", [1, 2])
def test_sized_round_with_several_steps_per_task_is_one_step_on_all_its_batches(
        cluster, per_execution):
    """compile(steps_per_execution=k): each worker's task reads k batches of its share; the
    round is one SGD step on all N x k of them (equal workers: the same stream's first k
    batches). Counting the task's granules once instead of k times would make the step k
    times too long."""
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    strategy = tf_hetero.HPSStrategy(cluster.resolver)
    with strategy.scope():
        model = small.model(1)
        model.compile(keras.optimizers.SGD(0.5), small.loss(), steps_per_execution=per_execution)
    before = model.get_weights()
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(BATCH)), epochs=1,
              steps_per_epoch=N * per_execution, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 1
    x, y = next(iter(small.dataset_fn(per_execution * BATCH)()))
    reference = small.model(1)
    reference.set_weights(before)
    with tf.GradientTape() as tape:
        loss = small.loss()(y, reference(x))
    grads = tape.gradient(loss, reference.trainable_variables)
    for got, w, g in zip(model.get_weights(), before, grads):
        np.testing.assert_allclose(got, w - 0.5 * g.numpy(), atol=1e-5)


def test_pipelined_sized_rounds_apply_every_granule_they_counted(cluster):
    """Pipelined H-PS: a worker's first task of a round pushes its buffer of the last round
    (PUSH_OLD) and starts a new one holding its own gradient, weighted by its size. The
    buffer's count must restart at that size: restarting at 1 made each apply divide by
    fewer granules than it summed (the mean gradient up to size x too large; found by the
    chaos runs, benchmarks/results/chaos/FINDINGS.md)."""
    import tf_hetero

    strategy = tf_hetero.HPSStrategy(cluster.resolver, granularity=GRANULE, pipeline=True)
    _fit(strategy, 6)
    rounds = strategy.engine.rounds
    units = N * BATCH // GRANULE  # one round's global batch in granules
    trained = sum(t.size for r in rounds for t in r.tasks if not t.drain)
    assert any(t.size > 1 for r in rounds for t in r.tasks)
    # A round's apply lands the buffers pushed in the next round (the drain round lands the
    # last): every apply is one whole global batch, and together they apply every granule.
    assert all(r.applied in (0, units) for r in rounds), [r.applied for r in rounds]
    assert sum(r.applied for r in rounds) == trained == len(rounds[:-1]) * units


# ---------------------------------------------- batch sizes inside groups (grouped, CASP)
def test_one_sized_group_is_one_step_on_the_global_batch(cluster):
    """GroupedSyncStrategy(groups=1, batch_sizes=True) is H-PS: one task per worker, sized by
    speed, each round one optimizer step on the concatenated global batch (to 1e-5)."""
    import tf_hetero

    rounds = 8
    strategy = tf_hetero.GroupedSyncStrategy(cluster.resolver, groups=1, batch_sizes=True,
                                             granularity=GRANULE)
    model, x, y = _fit(strategy, rounds, "momentum", profile="slow=2:4;base_ms=40")
    engine = strategy.engine
    units = N * BATCH // GRANULE
    assert len(engine.rounds) == rounds
    for r in engine.rounds:
        assert sorted(t.worker for t in r.tasks) == list(range(N))
        assert sum(t.size for t in r.tasks) == units == r.applied
    assert any(len({t.size for t in r.tasks}) > 1 for r in engine.rounds), \
        [r.info["sizes"] for r in engine.rounds]  # uneven somewhere: the weighting matters
    for got, want in zip(model.get_weights(), _reference(engine, x, y, "momentum")):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_sized_groups_split_each_groups_batches_and_apply_every_granule_once(cluster):
    """Two fixed groups with batch sizes: the pair's rounds read the pair's 2 batches split
    by speed (its 6x member takes the smaller share once measured), the lone worker's read
    its own batch; every granule read is applied once, and the fit's steps are covered.
    (6x, not less: the shares follow measured task times, and on a loaded host each task's
    fixed cost, measured up to ~130 ms, pulled a 3x member's measured speed within the
    rounding of an even split.)"""
    import tf_hetero

    strategy = tf_hetero.GroupedSyncStrategy(cluster.resolver, groups=[[0, 1], [2]],
                                             batch_sizes=True, granularity=GRANULE)
    steps = 10 * N
    progress = tf_hetero.Progress(interval_s=60, stream=io.StringIO())
    _fit(strategy, 10, profile="slow=1:6;base_ms=40", callbacks=[progress])
    per_batch = BATCH // GRANULE
    pair = [r for r in strategy.engine.rounds if r.info["group"] == [0, 1]]
    lone = [r for r in strategy.engine.rounds if r.info["group"] == [2]]
    assert all(sum(t.size for t in r.tasks) == 2 * per_batch for r in pair[:-1])
    assert all(sum(t.size for t in r.tasks) == per_batch for r in lone)
    assert all(r.applied == sum(t.size for t in r.tasks) for r in pair + lone)
    last = pair[-4:-1]
    assert all(r.info["sizes"][1] < r.info["sizes"][0] for r in last), \
        [r.info["sizes"] for r in pair]
    assert f"tasks {steps}/{steps}" in progress.line()
