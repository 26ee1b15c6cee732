# Frozen at commit ed64128: run with `git checkout ed64128`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""More model.fit usages under tf-hetero strategies on a process cluster: which work?"""
import sys, tempfile, os
import numpy as np
import tf_hetero
import tensorflow as tf
import tf_keras as keras
from tf_hetero.strategies import registry

names = sys.argv[1].split(",")
rng = np.random.default_rng(0)
x = rng.random((1024, 16)).astype("float32"); y = rng.integers(0, 4, 1024)


def model_fn(bn=False):
    layers = [keras.Input((16,)), keras.layers.Dense(32, activation="relu")]
    if bn:
        layers.append(keras.layers.BatchNormalization())
    layers += [keras.layers.Dropout(0.1), keras.layers.Dense(4)]
    m = keras.Sequential(layers)
    m.compile(keras.optimizers.SGD(0.05, momentum=0.9), keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return m


def ds(n=None):
    d = tf.data.Dataset.from_tensor_slices((x[:n], y[:n]) if n else (x, y))
    return d.repeat().batch(32) if n is None else d.batch(32)


def ckpt(s, m):
    d = tempfile.mkdtemp()
    m.fit(ds(), epochs=2, steps_per_epoch=8, verbose=0, callbacks=[
        keras.callbacks.ModelCheckpoint(os.path.join(d, "w.{epoch}.h5"), save_weights_only=True),
        keras.callbacks.BackupAndRestore(os.path.join(d, "backup"))])
    assert os.path.exists(os.path.join(d, "w.2.h5")), os.listdir(d)


CASES = {
    "steps_per_epoch 10 (not whole rounds)": lambda s, m: m.fit(ds(), epochs=2, steps_per_epoch=10, verbose=0),
    "initial_epoch 1 of 3": lambda s, m: m.fit(ds(), epochs=3, initial_epoch=1, steps_per_epoch=8, verbose=0),
    "ModelCheckpoint + BackupAndRestore": ckpt,
    "finite dataset shorter than steps": lambda s, m: m.fit(ds(256), epochs=1, steps_per_epoch=64, verbose=0),
    "predict after fit": lambda s, m: (m.fit(ds(), epochs=1, steps_per_epoch=8, verbose=0), print("   predict", m.predict(x[:64], batch_size=32, steps=2, verbose=0).shape)),
    "BatchNormalization": lambda s, m: None,
}

with tf_hetero.LocalCluster(num_workers=4, num_ps=2) as cluster:
    for name in names:
        print("==", name, flush=True)
        strategy = registry.make(name, cluster.resolver)
        for case, run in CASES.items():
            try:
                with strategy.scope():
                    m = model_fn(bn=case == "BatchNormalization")
                if case == "BatchNormalization":
                    m.fit(ds(), epochs=1, steps_per_epoch=8, verbose=0)
                else:
                    run(strategy, m)
                print(f"PASS {case}: iterations {int(m.optimizer.iterations.numpy())}", flush=True)
            except Exception as e:
                print(f"FAIL {case}: {type(e).__name__}: {str(e).strip().splitlines()[0][:400]}", flush=True)
        if hasattr(strategy, "shutdown"):
            strategy.shutdown()
