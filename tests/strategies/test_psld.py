"""PS load distribution on the shared in-process cluster (3 workers, 2 PS): load-aware
placement (``placement="balanced"``) and emulated PS tasks (profile ``ps_mbps``).

Timings are never asserted here; benchmarks/psld.py measures them as ratios."""

from __future__ import annotations

import numpy as np
import pytest
from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete

pytestmark = pytest.mark.cluster

N, B, ROUNDS = 3, 8, 4


def _skewed_model():
    """One large embedding (64 KB) beside small dense layers (8 KB, 5 KB and biases)."""
    import tf_keras as keras

    inp = keras.Input(shape=(4,), dtype="int32")
    x = keras.layers.Embedding(1024, 16)(inp)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    return keras.Model(inp, keras.layers.Dense(10)(x))


def _partitioner():
    """Shards only the embedding (any variable over 32 KB), in 16 shards of 4 KB: the dense
    kernels stay whole, as they do without a partitioner."""

    def partition(shape, dtype):
        big = shape.num_elements() * dtype.size > 32 * 1024
        return [16 if big else 1] + [1] * (len(shape) - 1)

    return partition


def _leaf_devices(model):
    from tf_hetero.emulation.ps import _leaves

    return [(v.name, v.device) for v in _leaves(model.variables)]


def test_balanced_placement_moves_shards_and_evens_a_skewed_model(cluster):
    import tf_hetero
    from tf_hetero.emulation.ps import bytes_per_ps
    from tf_hetero.policies.placement import ps_index
    from tf_hetero.policies.placement import Balanced, max_over_mean

    figures, devices = {}, {}
    for placement in ("round_robin", "balanced"):
        strategy = tf_hetero.BSPStrategy(cluster.resolver, _partitioner(), placement=placement)
        with strategy.scope():
            model = _skewed_model()
        held = bytes_per_ps(model.variables, 2)
        figures[placement] = max_over_mean(held)
        devices[placement] = _leaf_devices(model)
        # The placement recorded where every shard landed (and the strategy's own small
        # variables: the monitor's per-PS load counts all of them, read + push per step).
        placed = {name: ps for name, ps, _ in strategy.monitor.placement.placed}
        assert all(placed[name] == ps_index(device) for name, device in devices[placement])
        assert all(b <= a < b + 64 for a, b in zip(strategy.monitor.placement.bytes, held))
        assert strategy.monitor.ps_step_bytes() == strategy.monitor.placement.loads
        assert type(strategy.monitor.placement).__name__ == {
            "round_robin": "RoundRobin", "balanced": "Balanced"}[placement]
    # Shards are placed one by one: the embedding's 16 land on both PS tasks.
    shards = [d for n, d in devices["balanced"] if "embeddings/part_" in n]
    assert len(shards) == 16 and len(set(shards)) == 2
    assert devices["balanced"] != devices["round_robin"]  # the option is not ignored
    assert figures["balanced"] <= 1.05 < figures["round_robin"], figures
    # Largest first, planned from a shapes-only build: every planned variable matched.
    planned = Balanced(model_fn=_skewed_model)
    strategy = tf_hetero.BSPStrategy(cluster.resolver, _partitioner(), placement=planned)
    with strategy.scope():
        model = _skewed_model()
    assert planned._next == len(planned._plan) == 16 + 4  # pylint: disable=protected-access
    assert max_over_mean(bytes_per_ps(model.variables, 2)) <= 1.05


def _per_worker_fn(x, y):
    import tensorflow as tf

    def fn(ctx):
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        xs = tf.reshape(tf.constant(x), (ROUNDS, N, B, 5))
        ys = tf.reshape(tf.constant(y), (ROUNDS, N, B))
        ds = tf.data.Dataset.from_tensor_slices((tf.gather(xs, w, axis=1),
                                                 tf.gather(ys, w, axis=1)))
        return without_autotune(ds)
    return fn


def _small_model(seed=1):
    import tf_keras as keras

    return keras.Sequential([
        keras.layers.Dense(4, activation="tanh", input_shape=(5,),
                           kernel_initializer=keras.initializers.GlorotUniform(seed)),
        keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed + 1))])


@pytest.mark.parametrize("placement", ["round_robin", "balanced"])
def test_bsp_rounds_equal_large_batch_sgd_with_either_placement(cluster, placement):
    import tf_keras as keras

    import tf_hetero

    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROUNDS * N * B, 5)).astype("float32")
    y = rng.integers(0, 3, ROUNDS * N * B)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    strategy = tf_hetero.BSPStrategy(cluster.resolver, placement=placement)
    with strategy.scope():
        model = _small_model()
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9), loss)
    kernels = [layer.kernel.device for layer in model.layers]
    # Round-robin (kernel, bias, kernel, bias) puts both kernels on one PS; balanced splits
    # them, so the test fails if the option is ignored.
    assert (kernels[0] == kernels[1]) == (placement == "round_robin"), kernels
    model.fit(keras.utils.experimental.DatasetCreator(_per_worker_fn(x, y)), epochs=1,
              steps_per_epoch=N * ROUNDS, verbose=0)
    reference = _small_model()
    reference.compile(keras.optimizers.SGD(0.1, momentum=0.9), loss)
    xs, ys = x.reshape(ROUNDS, N, B, 5), y.reshape(ROUNDS, N, B)
    for k in range(ROUNDS):
        reference.train_on_batch(xs[k].reshape(N * B, 5), ys[k].reshape(N * B))
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert int(model.optimizer.iterations.numpy()) == ROUNDS
    assert [r.applied for r in strategy.engine.rounds] == [N] * ROUNDS


@pytest.mark.parametrize("name", ["pss", "bsp", "hps", "hpspipe"])
def test_emulated_ps_tasks_serve_every_step_and_report_their_load(cluster, name):
    """Every step asks each PS it touches to serve its reads and its push, inside the PS's
    critical section; the counters on the PS tasks and the Keras logs say so. H-PS's steps
    keep their gradients on the worker: each buffered push (int8 here) is served instead,
    its payload's bytes, not the variables' (before 2026-11-28 those pushes were free)."""
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    steps = 6
    profile = "base_ms=5;ps_mbps=50;ps_slow=1:3;ps_interfere=0:2@0.1/1"
    strategy = {
        "pss": lambda: tf.distribute.ParameterServerStrategy(cluster.resolver),
        "bsp": lambda: tf_hetero.BSPStrategy(cluster.resolver, placement="balanced"),
        "hps": lambda: tf_hetero.HPSStrategy(cluster.resolver, quantize="int8"),
        # pipelined: a round's push overlaps the next round's compute, drains push the last
        "hpspipe": lambda: tf_hetero.HPSStrategy(cluster.resolver, quantize="int8",
                                                 pipeline=True),
    }[name]()
    train = tf_hetero.data.load("digits", "train")
    with strategy.scope():
        model = tf_hetero.models.mlp(input_shape=train.input_shape, hidden=(32,))
        model.compile(keras.optimizers.SGD(0.05),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    device = tf_hetero.emulate(model, profile, strategy=strategy)
    servers = device.servers
    assert servers is not None and servers.us_per_byte[1] == 3 * servers.us_per_byte[0]
    callbacks = [tf_hetero.MonitorLogs(strategy)] if name == "bsp" else []
    history = model.fit(
        keras.utils.experimental.DatasetCreator(
            tf_hetero.data.dataset_fn(batch_size=16, num_workers=N, data=train)),
        epochs=1, steps_per_epoch=steps, verbose=0, callbacks=callbacks)
    totals = servers.totals()
    from tf_hetero.emulation.ps import bytes_per_ps

    held = bytes_per_ps(model.variables, 2)
    assert servers.read_bytes == held
    if name.startswith("hps"):  # a read per step; a service per buffered push, int8 payloads
        (buffers,) = strategy.coordinator.tracer.buffers
        pushes, _ = buffers.acc.traffic()
        from tf_hetero.policies.placement import ps_index
        from tf_hetero.strategies.runtime import quantize

        payload = [0, 0]
        for v in model.trainable_variables:
            payload[ps_index(v.device)] += quantize.get("int8").payload_bytes(
                v.shape.num_elements())
        assert 0 < pushes <= steps and 0 < payload[0] < held[0] / 3
        for p in range(2):
            assert totals["requests"][p] == steps + pushes
            assert totals["bytes"][p] == steps * held[p] + pushes * payload[p]
        return
    assert servers.push_bytes == held  # all trainable
    for p in range(2):  # one read and one push service per step and PS
        assert totals["requests"][p] == 2 * steps
        assert totals["bytes"][p] == 2 * steps * held[p]
        assert totals["busy_s"][p] > 0
    if name == "bsp":
        logs = history.history
        for p in range(2):
            assert logs[f"tf_hetero/ps{p}_served_bytes"] == [2 * steps * held[p]]
            assert logs[f"tf_hetero/ps{p}_bytes"] == [2 * steps * held[p]]
            assert logs[f"tf_hetero/ps{p}_requests"] == [2 * steps]
        assert "tf_hetero/ps_busy_max_over_mean" in logs
        assert len(strategy.monitor.ps_load_per_round()) == len(strategy.engine.rounds)


def test_a_steps_requests_to_two_ps_tasks_do_not_wait_for_each_other(cluster):
    """A step's requests to PS 0 and PS 1 run side by side: nothing on PS 0 is an ancestor of
    the end of PS 1's service. Built inline, tf.function's automatic control dependencies
    chained every request's timestamps and mutex release in program order, so PS 1's request
    waited for the end of PS 0's service (measured: 0.41 s for two 0.2 s services, 0.21 s
    since; docs/TF_INTERNALS.md section 9). Structural, no timing."""
    import tensorflow as tf

    from tf_hetero.emulation.profile import Profile
    from tf_hetero.emulation.ps import EmulatedServers
    from tf_hetero.policies.placement import ps_index

    tf.distribute.ParameterServerStrategy(cluster.resolver)  # connects to the cluster
    servers = EmulatedServers(Profile.parse("ps_mbps=1"), 2)

    @tf.function
    def step():
        start = tf.timestamp()
        return servers.serve_all([1000, 1000], after=[start])

    graph = step.get_concrete_function().graph
    ends = graph.structured_outputs
    assert len(ends) == 2

    def ancestors(op):
        seen, todo = set(), [op]
        while todo:
            o = todo.pop()
            for parent in [t.op for t in o.inputs] + list(o.control_inputs):
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return seen

    for mine, other in ((1, 0), (0, 1)):
        before = ancestors(ends[mine].op)
        assert not [o.name for o in before if ps_index(o.device) == other], (mine, other)


def test_a_bad_placement_or_ps_index_is_refused_with_the_fix(cluster):
    import tf_keras as keras

    import tf_hetero
    from tf_hetero.emulation.profile import ProfileError

    with pytest.raises(ValueError, match=r"placement='even' is not a placement\. Fix: use "
                                         r"'round_robin'"):
        tf_hetero.BSPStrategy(cluster.resolver, placement="even")
    strategy = tf_hetero.ASPStrategy(cluster.resolver)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,))])
    with pytest.raises(ProfileError, match=r"'ps_slow' names PS 2 but the cluster has PS tasks "
                                           r"0-1\. Fix"):
        tf_hetero.emulate(model, "ps_mbps=4;ps_slow=2:3", strategy=strategy)
