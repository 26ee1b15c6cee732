"""Sparse (IndexedSlices) gradients under the round strategies, on the shared in-process
cluster (3 workers, 2 PS): an embedding's gradient accumulates as rows (docs/SPARSE.md).

- a BSP round with an Embedding model is one large-batch step (SGD, Adam, legacy Adam), also
  with several micro-batches per task (the same round adds to a lane's rows) and with rounds
  touching disjoint rows in the same slot (an older round's rows never leak);
- what a task writes scales with the rows it touches, not the vocabulary (measured on the PS);
- H-PS (local accumulation) densifies an embedding gradient in its worker buffers and still
  equals large-batch SGD;
- EPSP slack folds late sparse lanes (smoke test: folded, each task once, untouched rows fixed).
"""

from __future__ import annotations

import numpy as np
import pytest

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete

from support.fit import round_batches as _round_batches  # the same data order as H-PS's tests

pytestmark = pytest.mark.cluster

N, B, IDS, ROUNDS = 3, 8, 3, 4
VOCAB, DIM = 64, 4


def _model(vocab=VOCAB, dim=DIM, ids=IDS):
    import tf_keras as keras

    return keras.Sequential([
        keras.layers.Embedding(vocab, dim, input_length=ids,
                               embeddings_initializer=keras.initializers.RandomUniform(
                                   -0.5, 0.5, seed=3)),
        keras.layers.Flatten(),
        keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(2))])


def _loss():
    import tf_keras as keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _optimizers():
    import tf_keras as keras

    return {
        "sgd": lambda: keras.optimizers.SGD(0.5),
        "sgd_momentum": lambda: keras.optimizers.SGD(0.5, momentum=0.9),
        "adam": lambda: keras.optimizers.Adam(0.05),
        "legacy_adam": lambda: keras.optimizers.legacy.Adam(0.05),
    }


def _data(rounds, k, seed=0):
    """Ids of round r come from rows [10r, 10r + 30): rounds r and r + 2 (the same slot)
    share a third of their rows, so a lane holds rows of an older round that the new one
    must overwrite (rows both touch) or leave out (rows only the old one touched); a
    micro-batch touches ~17 of them, so a task's second micro-batch meets rows its first
    wrote (added) and rows it did not (overwritten); ids repeat within and across batches."""
    rng = np.random.default_rng(seed)
    x = np.stack([rng.integers(10 * r, 10 * r + 30, (N, k, B, IDS)) for r in range(rounds)])
    y = rng.integers(0, 3, (rounds, N, k, B))
    return x.astype("int32"), y


def _accumulators(strategy):
    return strategy._cluster_coordinator.tracer.accumulators  # pylint: disable=protected-access


@pytest.mark.parametrize("opt,k", [("sgd", 1), ("adam", 1), ("adam", 2), ("legacy_adam", 1),
                                   ("sgd_momentum", 2)])
def test_bsp_embedding_rounds_equal_large_batch_steps(cluster, opt, k):
    """k micro-batches per task (steps_per_execution): a lane's second write of a round adds
    to the rows the first wrote and overwrites the others."""
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    make = _optimizers()[opt]
    x, y = _data(ROUNDS, k)

    def fn(ctx):
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        xs = tf.reshape(tf.gather(tf.constant(x), w, axis=1), (ROUNDS * k, B, IDS))
        ys = tf.reshape(tf.gather(tf.constant(y), w, axis=1), (ROUNDS * k, B))
        return without_autotune(tf.data.Dataset.from_tensor_slices((xs, ys)))

    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = _model()
        model.compile(make(), _loss(), steps_per_execution=k)
    model.fit(keras.utils.experimental.DatasetCreator(fn), epochs=1,
              steps_per_epoch=ROUNDS * N * k, verbose=0)
    reference = _model()
    reference.compile(make(), _loss())
    for r in range(ROUNDS):
        reference.train_on_batch(x[r].reshape(-1, IDS), y[r].reshape(-1))
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert int(model.optimizer.iterations.numpy()) == ROUNDS
    assert [r.applied for r in strategy.engine.rounds] == [N * k] * ROUNDS
    (acc,) = _accumulators(strategy)
    embeddings = model.layers[0].embeddings
    assert acc.is_sparse(embeddings)
    assert not acc.is_sparse(model.layers[2].kernel)


def test_embedding_writes_scale_with_rows_touched_not_vocabulary(cluster, capsys):
    """A 10,000 x 16 embedding, batches of 32 ids: a task writes ~32 rows, not 10,000."""
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    vocab, dim, batch, rounds = 10_000, 16, 32, 2
    rng = np.random.default_rng(1)
    x = rng.integers(0, vocab, (rounds, N, batch, 1)).astype("int32")
    y = rng.integers(0, 3, (rounds, N, batch))

    def fn(ctx):
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        ds = tf.data.Dataset.from_tensor_slices((tf.gather(tf.constant(x), w, axis=1),
                                                 tf.gather(tf.constant(y), w, axis=1)))
        return without_autotune(ds)

    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = _model(vocab, dim, ids=1)
        model.compile(keras.optimizers.SGD(0.5), _loss())
    model.fit(keras.utils.experimental.DatasetCreator(fn), epochs=1,
              steps_per_epoch=rounds * N, verbose=0)
    (acc,) = _accumulators(strategy)
    writes, received = acc.traffic()
    assert writes == rounds * N
    dense = acc.bytes_per_push  # every variable at full size: 10,000 x 16 x 4 + the Dense
    rows = sum(len(np.unique(x[r, w])) for r in range(rounds) for w in range(N))
    kernel_bytes = sum(v.shape.num_elements() * 4 for v in model.layers[2].trainable_variables)
    # Exactly the unique rows (values + int64 index) and the dense layer, per write.
    assert received == rows * (dim * 4 + 8) + writes * kernel_bytes
    assert received / writes < dense / 50
    with capsys.disabled():
        print(f"\n[sparse] bytes per write: dense {dense}, sparse {received / writes:.0f} "
              f"({rows / writes:.1f} rows of {vocab})")
    reference = _model(vocab, dim, ids=1)
    reference.compile(keras.optimizers.SGD(0.5), _loss())
    for r in range(rounds):
        reference.train_on_batch(x[r].reshape(-1, 1), y[r].reshape(-1))
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_hps_strict_densifies_embeddings_and_equals_large_batch_sgd(cluster):
    """Local accumulation keeps dense per-worker buffers (documented); still exact."""
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    rounds, per_round = 3, 5
    rng = np.random.default_rng(2)
    x = rng.integers(0, VOCAB, (rounds * per_round, N, B, IDS)).astype("int32")
    y = rng.integers(0, 3, (rounds * per_round, N, B))

    def fn(ctx):
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        ds = tf.data.Dataset.from_tensor_slices((tf.gather(tf.constant(x), w, axis=1),
                                                 tf.gather(tf.constant(y), w, axis=1)))
        return without_autotune(ds)

    strategy = tf_hetero.HPSStrategy(cluster.resolver, round_tasks=per_round)
    with strategy.scope():
        model = _model()
        model.compile(keras.optimizers.SGD(0.5), _loss())
    model.fit(keras.utils.experimental.DatasetCreator(fn), epochs=1,
              steps_per_epoch=rounds * per_round, verbose=0)
    engine = strategy.engine
    reference = _model()
    reference.compile(keras.optimizers.SGD(0.5), _loss())
    position = [0] * N
    for r in engine.rounds:
        xs, ys = _round_batches(r, x, y, position)
        if xs:
            reference.train_on_batch(np.concatenate(xs), np.concatenate(ys))
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5)
    (acc,) = _accumulators(strategy)
    assert not acc.is_sparse(model.layers[0].embeddings)


def test_epsp_slack_folds_late_sparse_gradients_and_leaves_untouched_rows(cluster):
    """Late lanes are folded by their round's row tags: training goes on, every task is
    applied once or dropped, and rows no batch touched never move (plain SGD)."""
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    steps, used = 45, 40  # ids < 40: rows 40..63 are never touched
    rng = np.random.default_rng(3)
    x = rng.integers(0, used, (steps, N, B, IDS)).astype("int32")
    y = rng.integers(0, 3, (steps, N, B))

    def fn(ctx):
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        ds = tf.data.Dataset.from_tensor_slices((tf.gather(tf.constant(x), w, axis=1),
                                                 tf.gather(tf.constant(y), w, axis=1)))
        return without_autotune(ds)

    strategy = tf_hetero.EPSPStrategy(cluster.resolver, sync="slack", late="fold", quorum=0.6,
                                      round_tasks=N, transfer_factor=None)
    with strategy.scope():
        model = _model()
        model.compile(keras.optimizers.SGD(0.5), _loss())
    start = model.layers[0].embeddings.numpy()
    tf_hetero.emulate(model, "slow=2:4;base_ms=30", strategy=strategy)
    model.fit(keras.utils.experimental.DatasetCreator(fn), epochs=1, steps_per_epoch=steps,
              verbose=0)
    engine = strategy.engine
    assert strategy.monitor.summary()["folded_lanes"] > 0
    copies = [t for r in engine.rounds for t in r.tasks + r.copies]
    assert all(t.state in ("done", "dropped", "folded") for t in copies)
    (acc,) = _accumulators(strategy)
    assert acc.is_sparse(model.layers[0].embeddings)
    end = model.layers[0].embeddings.numpy()
    np.testing.assert_array_equal(end[used:], start[used:])
    assert np.abs(end[:used] - start[:used]).max() > 1e-3
    assert all(np.isfinite(w).all() for w in model.get_weights())
