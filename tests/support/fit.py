"""Fits on the shared in-process cluster (3 workers, 2 PS) and what the strategy tests check
after them: per-worker data blocks, the optimizers every exactness test runs, a digits fit
under an emulated profile, the "every task applied once or dropped" check, and a record of
the results copied to the chief."""

from __future__ import annotations

import collections

import numpy as np

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete

from support import small

#: Workers of the shared cluster, rows of a micro-batch, rounds of the exactness fits.
N, B, ROUNDS = 3, 8, 4


def model(seed=1):
    """The small problem's model (Dense(4, tanh) -> Dense(3) logits), seeded."""
    return small.model(seed)


def loss():
    return small.loss()


class VelocityAt:
    """An update scale that steps every round at 1 and asks the apply to scale the
    optimizer's velocity by ``factor`` at the ``at``-th round it is asked for (1-based; the
    engine asks at each round's close that has an apply) and by 1 at the others: a back-off
    of AutoStrategy's step as its apply sees it (UpdateScale's optional ``velocity``)."""

    def __init__(self, at: int = 3, factor: float = 0.5):
        self.at, self.factor, self.asked = at, factor, 0

    def scale(self, group_size, num_workers, staleness, fraction=1.0):
        return 1.0

    def velocity(self):
        self.asked += 1
        return self.factor if self.asked == self.at else 1.0


def per_worker_fn(x, y, rounds=ROUNDS):
    """Worker w's k-th batch is block (k, w): round k of BSP covers blocks (k, 0..N-1)."""
    import tensorflow as tf

    def fn(ctx):
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        xs = tf.reshape(tf.constant(x), (rounds, N, B, 5))
        ys = tf.reshape(tf.constant(y), (rounds, N, B))
        ds = tf.data.Dataset.from_tensor_slices((tf.gather(xs, w, axis=1),
                                                 tf.gather(ys, w, axis=1)))
        return without_autotune(ds)
    return fn


#: Every optimizer family a round's apply must reproduce (the keys of :func:`optimizers`; a
#: test parametrizes over these names without importing tf_keras at collection).
OPTIMIZERS = ("adam", "adam_clipnorm", "adamw_weight_decay", "legacy_adam",
              "legacy_sgd_momentum", "sgd", "sgd_ema", "sgd_momentum")


def optimizers():
    """Name -> optimizer factory for each of :data:`OPTIMIZERS`."""
    import tf_keras as keras

    made = {
        "sgd": lambda: keras.optimizers.SGD(0.1),
        "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
        "adam": lambda: keras.optimizers.Adam(0.01),
        "legacy_adam": lambda: keras.optimizers.legacy.Adam(0.01),
        "legacy_sgd_momentum": lambda: keras.optimizers.legacy.SGD(0.1, momentum=0.9),
        "adamw_weight_decay": lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1),
        "sgd_ema": lambda: keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5),
        "adam_clipnorm": lambda: keras.optimizers.Adam(0.05, global_clipnorm=0.01),
    }
    assert sorted(made) == list(OPTIMIZERS), sorted(made)
    return made


def fit_with_profile(cluster, strategy, profile, steps, epochs=1, callbacks=(), batch=16,
                     stamps=0):
    """An MLP fit on the digits under ``strategy`` with the emulated ``profile`` (``stamps``:
    each worker's step stamps kept, ``tf_hetero.emulate``)."""
    import tf_keras as keras

    import tf_hetero

    train = tf_hetero.data.load("digits", "train")
    with strategy.scope():
        mlp = tf_hetero.models.mlp(input_shape=train.input_shape, hidden=(32,))
        mlp.compile(keras.optimizers.SGD(0.05), loss(), metrics=["accuracy"])
    tf_hetero.emulate(mlp, profile, strategy=strategy, stamps=stamps)
    history = mlp.fit(
        keras.utils.experimental.DatasetCreator(
            tf_hetero.data.dataset_fn(batch_size=batch, num_workers=N, data=train)),
        epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=list(callbacks))
    return mlp, history


def assert_every_task_applied_once_or_dropped(engine, submitted):
    tasks = [t for r in engine.rounds for t in r.tasks]
    assert len(tasks) == len({id(t) for t in tasks}) == submitted  # none lost, none twice
    done = collections.Counter((t.round, t.worker) for t in tasks if t.state == "done")
    assert all(t.state in ("done", "dropped") for t in tasks)
    for r in engine.rounds:
        assert r.applied == sum(r.lanes.values())  # what the PS applied == what was counted
        assert r.lanes == {w: n for (rid, w), n in done.items() if rid == r.id}


def round_batches(r, x, y, position):
    """The micro-batches round ``r``'s tasks ran, in data order (advances ``position``):
    worker w's j-th micro-batch is ``x[j, w]``."""
    xs, ys = [], []
    for w in range(N):
        n = sum(t.worker == w and t.state == "done" and not t.drain for t in r.tasks)
        xs += [x[j, w] for j in range(position[w], position[w] + n)]
        ys += [y[j, w] for j in range(position[w], position[w] + n)]
        position[w] += n
    return xs, ys


def random_blocks(rounds, seed=0):
    """``rounds * N * B`` random rows of the small problem and their labels."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rounds * N * B, 5)).astype("float32")
    y = rng.integers(0, 3, rounds * N * B)
    return x, y


def record_copies_to_chief(monkeypatch):
    """Records the results copied to the chief from here on: ``(copies, held)``, ``copies``
    a list of ``(result, thread name)`` per copy TF makes (``_copy_to_local``), ``held`` the
    results the fit's ``join`` copies itself on the main thread
    (``tfcompat.coordinator.copy_to_chief``: the one ``fit`` holds for its logs, if no worker
    thread copied it before)."""
    import threading

    from tensorflow.python.distribute.coordinator import values

    from tf_hetero import tfcompat

    copies, held = [], []
    stock, stock_copy = values.RemoteValueImpl._copy_to_local, tfcompat.coordinator.copy_to_chief

    def counting(self):
        copies.append((self, threading.current_thread().name))
        return stock(self)

    def joining(remote_value):
        if threading.current_thread() is threading.main_thread():
            held.append(remote_value)
        stock_copy(remote_value)

    monkeypatch.setattr(values.RemoteValueImpl, "_copy_to_local", counting)
    monkeypatch.setattr(tfcompat.coordinator, "copy_to_chief", joining)
    return copies, held
