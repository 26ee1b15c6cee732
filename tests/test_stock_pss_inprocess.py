"""model.fit under the stock ParameterServerStrategy on one in-process LocalCluster, with
heterogeneity emulation, task timing and progress output. One cluster and one fit per module."""

from __future__ import annotations

import io

import numpy as np
import pytest

pytestmark = pytest.mark.cluster

WORKERS, EPOCHS, STEPS, BATCH = 4, 2, 30, 16
PROFILE = "slow=3:3;base_ms=80"


@pytest.fixture(scope="module")
def trained():
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    cluster = tf_hetero.LocalCluster(WORKERS, 1, profile=PROFILE, processes=False).start()
    strategy = tf.distribute.ParameterServerStrategy(cluster.resolver)
    train = tf_hetero.data.load("digits", "train")
    with strategy.scope():
        model = tf_hetero.models.mlp(input_shape=train.input_shape)
        model.compile(keras.optimizers.Adam(2e-3),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    device = tf_hetero.emulate(model, cluster.profile, strategy=strategy)
    log = tf_hetero.TaskLog.for_strategy(strategy)
    out = io.StringIO()
    history = model.fit(
        keras.utils.experimental.DatasetCreator(
            tf_hetero.data.dataset_fn(batch_size=BATCH, num_workers=WORKERS, data=train)),
        epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0,
        callbacks=[tf_hetero.Progress(interval_s=0.5, task_log=log, stream=out)])
    test = tf_hetero.data.load("digits", "test")
    accuracy = float(np.mean(np.argmax(model(test.x).numpy(), axis=1) == test.y))
    return dict(cluster=cluster, strategy=strategy, device=device, log=log, out=out.getvalue(),
                history=history.history, accuracy=accuracy)


def test_every_scheduled_task_runs_once_and_is_logged(trained):
    assert len(trained["log"]) == EPOCHS * STEPS
    assert sum(trained["device"].tasks_per_worker()) == EPOCHS * STEPS
    assert trained["device"].tasks_per_worker() == trained["log"].counts(WORKERS)


def test_measured_slowdown_ratio_matches_profile(trained):
    """Worker 3 is configured 3x slower: its task time is 3x the others' within 15%.

    Compared at each worker's 25th percentile, not its median: the emulated device time is a
    floor that the process's load can only add to. Late in the full suite (CI, 2026-11-26)
    worker 0's *median* read 1.71x the fastest worker's, so most of its ~17 tasks had waited
    on something outside the step (the in-process servers of earlier modules share the two
    cores; docs/TF_INTERNALS.md, "Where the suite's time goes"). Without emulation every
    ratio is ~1 and the worker-3 assertion fails.
    """
    per = [[r.duration for r in trained["log"].records if r.worker == w][1:]
           for w in range(WORKERS)]  # each worker's first task traces the step
    low = [float(np.percentile(d, 25)) for d in per]
    ratios = [t / min(low) for t in low]
    assert ratios[3] == pytest.approx(3.0, rel=0.15), ratios
    for w in range(3):
        assert ratios[w] == pytest.approx(1.0, rel=0.15), ratios


def test_slow_worker_runs_fewer_tasks_under_async_pss(trained):
    counts = trained["log"].counts(WORKERS)
    assert counts[3] < min(counts[:3]), counts


def test_progress_prints_task_lines_and_one_line_per_epoch(trained):
    out = trained["out"]
    assert "per worker" in out and f"/{EPOCHS * STEPS}" in out
    assert out.count("done in") == EPOCHS
    assert "loss" in out


def test_training_reduces_loss(trained):
    loss = trained["history"]["loss"]
    assert loss[-1] < loss[0]
    # Well above chance (10 classes: 0.1). Asynchronous steps interleave differently from run
    # to run: a clean-clone run on 2026-11-28 ended at 0.486, another above 0.5.
    assert trained["accuracy"] > 0.3


def test_an_emulated_link_slows_stock_pss_by_the_bytes_each_step_moves(trained):
    """Worker 1 gets a 2 MB/s link: each of its steps waits for reading every variable and
    pushing every gradient, in series with its device time (the others' links are free)."""
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    base_ms, mbps = 40, 2.0
    strategy = tf.distribute.ParameterServerStrategy(trained["cluster"].resolver)
    train = tf_hetero.data.load("digits", "train")
    with strategy.scope():
        model = tf_hetero.models.mlp(input_shape=train.input_shape)
        model.compile(keras.optimizers.SGD(0.01),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tf_hetero.emulate(model, f"base_ms={base_ms};link=1000,{mbps},1000,1000", strategy=strategy)
    log = tf_hetero.TaskLog.for_strategy(strategy)
    model.fit(keras.utils.experimental.DatasetCreator(
        tf_hetero.data.dataset_fn(batch_size=BATCH, num_workers=WORKERS, data=train)),
        epochs=1, steps_per_epoch=80, verbose=0)  # worker 1: ~10 steps, ~9 after its first
    moved = 2 * sum(w.size * 4 for w in model.get_weights())  # read all, push all (fp32)
    link_ms = moved / (mbps * 1e6) * 1e3
    medians = [1e3 * s.median_s for s in log.stats(WORKERS, skip_first=1)]
    fast = float(np.median([medians[w] for w in (0, 2, 3)]))
    # The link adds its time to worker 1's steps; the RPC overhead every step carries cancels.
    # 25%: late in the full suite (CI) worker 1 read +22.6% over 4 steps (alone: +0-1%); the
    # bound still tells the read and the push from the read alone (-50%) or a push charged
    # twice (+50%).
    assert medians[1] - fast == pytest.approx(link_ms, rel=0.25), (medians, link_ms)
    assert all(m == pytest.approx(fast, rel=0.15) for m in medians[::2]), medians
    log.detach()
