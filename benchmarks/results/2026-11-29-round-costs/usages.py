# Frozen at commit ed64128: run with `git checkout ed64128`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""Common model.fit usages under a sized strategy on a process cluster: which work?"""
import sys, traceback
import numpy as np
import tf_hetero
import tensorflow as tf
import tf_keras as keras
from tf_hetero.strategies import registry

names = sys.argv[1].split(",") if len(sys.argv) > 1 else ["hps"]
rng = np.random.default_rng(0)
x = rng.random((1024, 16)).astype("float32"); y = rng.integers(0, 4, 1024); w = rng.random(1024).astype("float32")


def model_fn():
    m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    m.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return m


def dict_model():
    a = keras.Input((16,), name="a"); b = keras.Input((1,), name="b")
    h = keras.layers.Concatenate()([a, b]); out = keras.layers.Dense(4)(h)
    m = keras.Model({"a": a, "b": b}, out)
    m.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


CASES = {
    "dataset batch 32": lambda s, m: m.fit(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32), epochs=1, steps_per_epoch=8, verbose=0),
    "dataset batch 32 drop_remainder": lambda s, m: m.fit(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32, drop_remainder=True), epochs=1, steps_per_epoch=8, verbose=0),
    "sample weights in dataset": lambda s, m: m.fit(tf.data.Dataset.from_tensor_slices((x, y, w)).repeat().batch(32), epochs=1, steps_per_epoch=8, verbose=0),
    "numpy x,y batch 32": lambda s, m: m.fit(x, y, batch_size=32, epochs=1, steps_per_epoch=8, verbose=0),
    "numpy + sample_weight": lambda s, m: m.fit(x, y, sample_weight=w, batch_size=32, epochs=1, steps_per_epoch=8, verbose=0),
    "validation_data dataset": lambda s, m: m.fit(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32), epochs=2, steps_per_epoch=8, validation_data=tf.data.Dataset.from_tensor_slices((x, y)).batch(64), validation_steps=2, verbose=0),
    "evaluate after fit": lambda s, m: (m.fit(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32), epochs=1, steps_per_epoch=8, verbose=0), print("   eval", m.evaluate(x, y, batch_size=64, verbose=0))),
    "class_weight": lambda s, m: m.fit(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32), epochs=1, steps_per_epoch=8, class_weight={0: 1.0, 1: 2.0, 2: 1.0, 3: 1.0}, verbose=0),
    "shuffle+map+prefetch pipeline": lambda s, m: m.fit(tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).map(lambda a, b: (a * 2.0, b)).batch(32).repeat().prefetch(2), epochs=1, steps_per_epoch=8, verbose=0),
}

def main(cluster, name):
    print("==", name, flush=True)
    strategy = registry.make(name, cluster.resolver)
    for case, run in CASES.items():
        try:
            with strategy.scope():
                m = model_fn()
            run(strategy, m)
            print(f"PASS {case}: iterations {int(m.optimizer.iterations.numpy())}", flush=True)
        except Exception as e:
            print(f"FAIL {case}: {type(e).__name__}: {str(e).strip().splitlines()[0][:300]}", flush=True)
    try:
        with strategy.scope():
            m = dict_model()
        ds = tf.data.Dataset.from_tensor_slices(({"a": x, "b": w[:, None]}, y)).repeat().batch(32)
        m.fit(ds, epochs=1, steps_per_epoch=8, verbose=0)
        print("PASS dict inputs", flush=True)
    except Exception as e:
        print(f"FAIL dict inputs: {type(e).__name__}: {str(e).strip().splitlines()[0][:300]}", flush=True)
    if hasattr(strategy, "shutdown"):
        strategy.shutdown()


with tf_hetero.LocalCluster(num_workers=4, num_ps=2) as cluster:
    for n in names:
        main(cluster, n)
