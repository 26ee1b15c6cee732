# Frozen at commit ed64128: run with `git checkout ed64128`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""How long a round's apply call takes on a quiet process cluster (4 workers, 2 PS), and
how long simpler functions placed the same way take: is it hops, or the call itself?"""
import time, statistics as st
import numpy as np
import tf_hetero
import tensorflow as tf
import tf_keras as keras


def timeit(name, f, n=60):
    for _ in range(5):
        f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    ts.sort()
    print(f"{name:40s} median {1e3*ts[n//2]:6.2f} p10 {1e3*ts[n//10]:6.2f} p90 {1e3*ts[9*n//10]:6.2f} ms", flush=True)


with tf_hetero.LocalCluster(num_workers=4, num_ps=2) as cluster:
    strategy = tf_hetero.HPSStrategy(cluster.resolver)
    x = np.random.rand(2048, 64).astype("float32"); y = np.random.randint(0, 10, 2048)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(128, activation="relu", input_shape=(64,)),
                                  keras.layers.Dense(10)])
        model.compile(keras.optimizers.SGD(0.01, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
    model.fit(ds, epochs=1, steps_per_epoch=16, verbose=0)
    coord = strategy._hetero_coordinator if hasattr(strategy, "_hetero_coordinator") else None
    from tf_hetero.strategies.runtime import dispatcher as dmod
    disp = [o for o in __import__("gc").get_objects() if isinstance(o, dmod.ClosureDispatcher)][0]
    (accs, fn), = list(disp._apply_fns.items())[:1]
    weights, expected = disp._apply_arrays()
    from tf_hetero.strategies.runtime.dispatcher import _apply_args
    args = _apply_args(weights, expected, 1.0)
    with strategy.scope():
        timeit("round apply (all lanes weight 0)", lambda: fn(*args).numpy())
    vs = model.trainable_variables
    print([v.device for v in vs])
    v0 = [v for v in vs if "ps/task:0" in v.device or "ps/replica:0/task:0" in v.device][0]
    v1 = [v for v in vs if "task:1" in v.device][0]

    @tf.function
    def const():
        return tf.constant(1.0)

    @tf.function
    def read_one():
        return tf.reduce_sum(v0)

    @tf.function
    def read_two():
        return tf.reduce_sum(v0) + tf.reduce_sum(v1)

    @tf.function
    def on_ps_two():
        outs = []
        for v in (v0, v1):
            with tf.device(v.device):
                outs.append(v.assign_add(tf.zeros_like(v)).op)
        with tf.control_dependencies(outs):
            return tf.constant(1.0)

    @tf.function
    def two_hops():
        with tf.device(v0.device):
            a = tf.reduce_sum(v0)
        b = a * 2.0  # chief
        with tf.device(v1.device):
            c = tf.reduce_sum(v1) * b
        return c * 2.0

    @tf.function
    def four_hops():
        with tf.device(v0.device):
            a = tf.reduce_sum(v0)
        b = a * 2.0
        with tf.device(v1.device):
            c = tf.reduce_sum(v1) * b
        d = c * 2.0
        with tf.device(v0.device):
            e = tf.reduce_sum(v0) * d
        f = e * 2.0
        with tf.device(v1.device):
            g = tf.reduce_sum(v1) * f
        return g * 2.0

    timeit("const on chief", lambda: const().numpy())
    timeit("read one PS var", lambda: read_one().numpy())
    timeit("read two PS vars (two PS)", lambda: read_two().numpy())
    timeit("assign on two PS, control deps", lambda: on_ps_two().numpy())
    timeit("2 sequential chief<->PS hops", lambda: two_hops().numpy())
    timeit("4 sequential chief<->PS hops", lambda: four_hops().numpy())
    with strategy.scope():
        timeit("round apply again", lambda: fn(*args).numpy())
