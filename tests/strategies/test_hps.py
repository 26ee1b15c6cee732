"""HPSStrategy under real ``model.fit`` on the shared in-process cluster (3 workers, 2 PS)."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete

from support.fit import round_batches

pytestmark = pytest.mark.cluster

N, B = 3, 8


def _keras(keras3: bool):
    if keras3:
        import keras
    else:
        import tf_keras as keras
    return keras


def _model(keras3: bool = False):
    """The test model, tf_keras's or (``keras3``) Keras 3's (``tf_hetero.keras3.enable()``):
    the same layers and seeded initializers."""
    keras = _keras(keras3)
    first = [keras.Input((5,))] if keras3 else []
    return keras.Sequential(first + [
        keras.layers.Dense(4, activation="tanh", **({} if keras3 else {"input_shape": (5,)}),
                           kernel_initializer=keras.initializers.GlorotUniform(1)),
        keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(2))])


def _fit(strategy, tasks, lr=0.1, seed=0, profile=None, keras3=False):
    """Worker w's j-th micro-batch is block (j, w) of fixed data; returns the model and data."""
    import tensorflow as tf

    import tf_hetero

    keras = _keras(keras3)
    if keras3:
        tf_hetero.keras3.enable()

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(tasks, N, B, 5)).astype("float32")
    y = rng.integers(0, 3, (tasks, N, B))

    def fn(ctx):
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        ds = tf.data.Dataset.from_tensor_slices((tf.gather(tf.constant(x), w, axis=1),
                                                 tf.gather(tf.constant(y), w, axis=1)))
        return without_autotune(ds)

    with strategy.scope():
        model = _model(keras3)
        model.compile(keras.optimizers.SGD(lr),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if profile:
        tf_hetero.emulate(model, profile, strategy=strategy)
    model.fit(fn if keras3 else keras.utils.experimental.DatasetCreator(fn), epochs=1,
              steps_per_epoch=tasks, verbose=0)
    return model, x, y


def _large_batch_reference(engine, x, y, lr=0.1):
    """The weights of one SGD step per round on the micro-batches each worker ran in it."""
    import tf_keras as keras

    reference = _model()
    reference.compile(keras.optimizers.SGD(lr),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    position = [0] * N
    for r in engine.rounds:
        xs, ys = round_batches(r, x, y, position)
        if xs:
            reference.train_on_batch(np.concatenate(xs), np.concatenate(ys))
    return reference.get_weights()


def _assert_equals_large_batch_sgd(model, engine, x, y, atol, lr=0.1):
    """``model`` == one SGD step per round on the micro-batches each worker ran in it."""
    for got, want in zip(model.get_weights(), _large_batch_reference(engine, x, y, lr)):
        np.testing.assert_allclose(got, want, atol=atol)


@pytest.mark.parametrize("keras3", [False, True], ids=["tf_keras", "keras3"])
def test_strict_rounds_equal_large_batch_sgd_with_one_push_per_worker(cluster, keras3):
    """(A Keras 3 model too: the same layers and initializers, so the same reference.)"""
    import tf_hetero

    rounds, per_round = 4, 7
    strategy = tf_hetero.HPSStrategy(cluster.resolver, round_tasks=per_round)
    model, x, y = _fit(strategy, rounds * per_round, keras3=keras3)
    engine = strategy.engine
    _assert_equals_large_batch_sgd(model, engine, x, y, atol=1e-5)
    assert [r.applied for r in engine.rounds] == [per_round] * rounds
    # The first round, before any worker is measured, is pulled; each of its tasks pushes.
    assert engine.rounds[0].info["pulled"] and all(t.pushed == 1 for t in engine.rounds[0].tasks)
    for r in engine.rounds[1:]:  # pinned shares; each worker's last task pushed all of its own
        shares = r.info["shares"]
        assert sum(shares.values()) == per_round and min(shares.values()) >= 1
        assert r.lanes == shares
        assert sorted(t.worker for t in r.tasks if t.pushed) == sorted(shares)
    s = strategy.monitor.summary()
    pushes = per_round + N * (rounds - 1)  # not one per micro-batch
    assert s["pushes"] == pushes
    assert s["bytes_pushed"] == pushes * strategy.monitor.bytes_per_push


def test_pipelined_rounds_apply_the_previous_rounds_gradients_and_lose_none(cluster):
    import tf_hetero

    rounds, per_round = 4, 6
    strategy = tf_hetero.HPSStrategy(cluster.resolver, round_tasks=per_round, pipeline=True)
    model, x, y = _fit(strategy, rounds * per_round)
    engine = strategy.engine
    # Round 0 is pulled (no speeds yet): its tasks push at once; later rounds push late.
    assert engine.rounds[0].applied == per_round
    assert engine.rounds[-1].info["drain"] is True  # fit's join emptied the buffers
    assert sum(max(r.applied, 0) for r in engine.rounds) == rounds * per_round
    assert engine.rounds[1].applied == 0  # round 0 pushed its own; round 1 holds its buffers
    for r in engine.rounds[2:]:  # round r applies what round r - 1 computed
        previous = engine.rounds[r.id - 1]
        assert r.lanes == {w: n for w, n in collections.Counter(
            t.worker for t in previous.tasks if not t.drain).items()}
    # Delayed SGD: round r's update is the mean gradient of round r - 1's micro-batches, taken
    # at the weights round r - 1 ran with.
    import tensorflow as tf
    import tf_keras as keras

    reference, loss = _model(), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    pending, position = None, [0] * N
    for r in engine.rounds:
        xs, ys = round_batches(r, x, y, position)
        grads = None
        if xs:
            with tf.GradientTape() as tape:
                value = loss(np.concatenate(ys), reference(np.concatenate(xs)))
            grads = tape.gradient(value, reference.trainable_variables)
        if r.info.get("pulled"):  # applied in its own round
            pending, grads = grads, None
        if pending is not None:
            for v, g in zip(reference.trainable_variables, pending):
                v.assign_sub(0.1 * g)
        pending = grads
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5)
    # Staleness as applied: round 0's tasks pushed their own gradients (0), later ones were
    # applied one round after they ran (1).
    stale = collections.defaultdict(set)
    for t in strategy.monitor.tasks:
        stale[t.round == 0].add(t.staleness)
    assert stale == {True: {0}, False: {1}}


@pytest.mark.parametrize("codec, ratio, keras3", [("fp16", 1e-3, False), ("int8", 0.01, False),
                                                  ("int4", 0.1, False), ("int8", 0.01, True)])
def test_quantized_pushes_shrink_bytes_and_track_the_exact_update(cluster, codec, ratio, keras3):
    """The weights land near the exact large-batch result: the distance to it is a small
    fraction (``ratio``) of the distance the exact updates moved them (a run whose pushes
    applied nothing would be at ratio 1); a Keras 3 model's too (int8)."""
    import tf_hetero

    rounds, per_round = 6, 6
    strategy = tf_hetero.HPSStrategy(cluster.resolver, round_tasks=per_round, quantize=codec)
    model, x, y = _fit(strategy, rounds * per_round, lr=0.5, keras3=keras3)
    engine = strategy.engine
    exact = _large_batch_reference(engine, x, y, lr=0.5)
    initial = _model().get_weights()
    moved = max(float(np.abs(e - i).max()) for e, i in zip(exact, initial))
    error = max(float(np.abs(g - e).max()) for g, e in zip(model.get_weights(), exact))
    assert moved > 0.05 and error < ratio * moved, (codec, error, moved)
    # Bytes per push are the encoded payload's (the ratios for a large tensor are in
    # tests/strategies/runtime/test_quantize.py; this 39-parameter model pays a 4-byte scale
    # per tensor).
    wire = sum(tf_hetero.strategies.runtime.quantize.get(codec).payload_bytes(w.size)
               for w in model.get_weights())
    assert strategy.monitor.bytes_per_push == wire < sum(4 * w.size for w in model.get_weights())
    assert strategy.monitor.summary()["pushes"] == per_round + N * (rounds - 1)


def test_shares_follow_measured_speed_and_respect_memory_budgets(cluster):
    import tf_hetero

    strategy = tf_hetero.HPSStrategy(cluster.resolver, round_tasks=9)
    _fit(strategy, 45, profile="slow=2:4;base_ms=30")
    last = [r.info["shares"] for r in strategy.engine.rounds[-3:]]
    assert all(s[2] < s[0] and s[2] < s[1] for s in last), last  # the slow worker does less
    # (The measured task times behind the shares are not compared here: a wall-time ratio
    # is the benchmarks' to report; the shares are the decision they drive.)

    capped = tf_hetero.HPSStrategy(cluster.resolver, round_tasks=9, memory_budget=[2, 3, 4])
    _fit(capped, 27, profile="slow=2:4;base_ms=30")
    assert all(r.info["shares"] == {0: 2, 1: 3, 2: 4} for r in capped.engine.rounds)


def test_hps_strategy_rejects_impossible_settings_before_connecting(cluster):
    import tf_hetero

    with pytest.raises(ValueError, match=r"round_tasks=2\) with 3 workers and min_tasks=1: "
                                         r"need an integer >= 3"):
        tf_hetero.HPSStrategy(cluster.resolver, round_tasks=2)
    with pytest.raises(ValueError, match=r"memory budgets add up to 6 .* fewer than "
                                         r"round_tasks=12\. Fix"):
        tf_hetero.HPSStrategy(cluster.resolver, round_tasks=12, memory_budget=2)
    with pytest.raises(ValueError, match=r"memory_budget=\[1, 2\]\): give one budget per worker"):
        tf_hetero.HPSStrategy(cluster.resolver, memory_budget=[1, 2])
    with pytest.raises(ValueError, match=r"quantize='int3': use one of fp32, fp16, int8, int4"):
        tf_hetero.HPSStrategy(cluster.resolver, quantize="int3")


def test_hps_refuses_several_micro_batches_per_task_with_a_clear_error(cluster):
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    strategy = tf_hetero.HPSStrategy(cluster.resolver, round_tasks=3)
    with strategy.scope():
        model = _model()
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=2)

    def fn(ctx):
        ds = tf.data.Dataset.from_tensors((tf.zeros([B, 5]), tf.zeros([B], tf.int64))).repeat()
        return without_autotune(ds)

    with pytest.raises(ValueError, match=r"steps_per_execution > 1.*Fix: compile with "
                                         r"steps_per_execution=1"):
        model.fit(keras.utils.experimental.DatasetCreator(fn), epochs=1, steps_per_epoch=6,
                  verbose=0)
