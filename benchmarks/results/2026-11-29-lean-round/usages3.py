# Frozen at commit 3076b75: run with `git checkout 3076b75`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""Yet more model.fit usages under tf-hetero strategies on a process cluster: which work?

    python usages3.py pss,hps,epsp,bsp [case-substring]
"""
import os, sys, tempfile
import numpy as np
import tf_hetero
import tensorflow as tf
import tf_keras as keras
from tf_hetero.strategies import registry

names = sys.argv[1].split(",")
only = sys.argv[2] if len(sys.argv) > 2 else ""
rng = np.random.default_rng(0)
x = rng.random((1024, 16)).astype("float32"); y = rng.integers(0, 4, 1024)
tok = rng.integers(1, 50, (1024, 6)).astype("int32")


def model_fn(reg=None, opt=None, spe=None, metrics=("accuracy",), **compile_kw):
    m = keras.Sequential([keras.Input((16,)),
                          keras.layers.Dense(32, activation="relu", kernel_regularizer=reg),
                          keras.layers.Dense(4)])
    m.compile(opt or keras.optimizers.SGD(0.05, momentum=0.9),
              keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=list(metrics),
              steps_per_execution=spe, **compile_kw)
    return m


def ds(batch=32, inputs=None):
    return tf.data.Dataset.from_tensor_slices((x if inputs is None else inputs, y)).repeat().batch(batch)


def lr_of(m):
    return float(keras.backend.get_value(m.optimizer.learning_rate))


def reduce_lr(s):
    with s.scope():
        m = model_fn()
    m.fit(ds(), epochs=3, steps_per_epoch=8, verbose=0, callbacks=[
        keras.callbacks.ReduceLROnPlateau("loss", factor=0.5, patience=0, min_delta=10.0)])
    assert abs(lr_of(m) - 0.05 * 0.25) < 1e-6, lr_of(m)
    return m


def schedule_cb(s):
    with s.scope():
        m = model_fn()
    m.fit(ds(), epochs=3, steps_per_epoch=8, verbose=0, callbacks=[
        keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.05 / (1 + epoch))])
    assert abs(lr_of(m) - 0.05 / 3) < 1e-6, lr_of(m)
    return m


def early(s):
    with s.scope():
        m = model_fn()
    h = m.fit(ds(), epochs=6, steps_per_epoch=8, verbose=0, callbacks=[
        keras.callbacks.EarlyStopping("loss", patience=1, min_delta=10.0, restore_best_weights=True)])
    assert len(h.history["loss"]) == 2, h.history
    return m


def loggers(s):
    d = tempfile.mkdtemp()
    with s.scope():
        m = model_fn()
    m.fit(ds(), epochs=2, steps_per_epoch=8, verbose=0, callbacks=[
        keras.callbacks.CSVLogger(os.path.join(d, "log.csv")),
        keras.callbacks.TensorBoard(os.path.join(d, "tb"))])
    assert open(os.path.join(d, "log.csv")).read().count("\n") == 3
    return m


class Custom(keras.Model):
    def train_step(self, data):
        xb, yb = data
        with tf.GradientTape() as tape:
            loss = self.compiled_loss(yb, self(xb, training=True)) * 1.0
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def custom_step(s):
    with s.scope():
        inp = keras.Input((16,)); out = keras.layers.Dense(4)(keras.layers.Dense(32, activation="relu")(inp))
        m = Custom(inp, out)
        m.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    m.fit(ds(), epochs=1, steps_per_epoch=8, verbose=0)
    return m


def regularized(s):
    with s.scope():
        m = model_fn(reg=keras.regularizers.l2(1e-3))
    m.fit(ds(), epochs=1, steps_per_epoch=8, verbose=0)
    return m


def spe(s):
    with s.scope():
        m = model_fn(spe=4)
    m.fit(ds(), epochs=1, steps_per_epoch=16, verbose=0)
    return m


def more_metrics(s):
    with s.scope():
        m = model_fn(metrics=("accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=2)))
    h = m.fit(ds(), epochs=1, steps_per_epoch=8, verbose=0, validation_data=ds(), validation_steps=2)
    assert "val_sparse_top_k_categorical_accuracy" in h.history, list(h.history)
    return m


def eager(s):
    with s.scope():
        m = model_fn(run_eagerly=True)
    m.fit(ds(), epochs=1, steps_per_epoch=8, verbose=0)
    return m


def jit(s):
    with s.scope():
        m = model_fn(jit_compile=True)
    m.fit(ds(), epochs=1, steps_per_epoch=8, verbose=0)
    return m


def save_load(s):
    d = tempfile.mkdtemp()
    with s.scope():
        m = model_fn()
    m.fit(ds(), epochs=1, steps_per_epoch=8, verbose=0)
    m.save(os.path.join(d, "sm"))
    m.save(os.path.join(d, "m.h5"))
    r = keras.models.load_model(os.path.join(d, "sm"))
    np.testing.assert_allclose(r.predict(x[:8], verbose=0), m.predict(x[:8], batch_size=8, steps=1, verbose=0), atol=1e-5)
    return m


def mixed(s):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with s.scope():
            m = model_fn()
        m.fit(ds(), epochs=1, steps_per_epoch=8, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return m


def two_batch_sizes(s):
    with s.scope():
        m = model_fn()
    m.fit(ds(64), epochs=1, steps_per_epoch=8, verbose=0)
    m.fit(ds(16), epochs=1, steps_per_epoch=8, verbose=0)
    return m


def embedding(s):
    with s.scope():
        m = keras.Sequential([keras.Input((6,), dtype="int32"), keras.layers.Embedding(50, 8),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(4)])
        m.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    m.fit(ds(inputs=tok), epochs=1, steps_per_epoch=8, verbose=0)
    return m


def nan(s):
    with s.scope():
        m = model_fn(opt=keras.optimizers.SGD(1e9))
    h = m.fit(ds(), epochs=2, steps_per_epoch=8, verbose=0, callbacks=[keras.callbacks.TerminateOnNaN()])
    print("   history", {k: [round(v, 3) for v in vs] for k, vs in h.history.items()})
    return m


def val_freq(s):
    with s.scope():
        m = model_fn()
    h = m.fit(ds(), epochs=2, steps_per_epoch=8, verbose=0, validation_data=ds(), validation_steps=2,
              validation_freq=2)
    ev = m.evaluate(ds(), steps=4, verbose=0, return_dict=True)
    print("   evaluate", ev)
    return m


CASES = {"ReduceLROnPlateau": reduce_lr, "LearningRateScheduler": schedule_cb,
         "EarlyStopping restore_best_weights": early, "CSVLogger + TensorBoard": loggers,
         "custom train_step": custom_step, "kernel_regularizer": regularized,
         "steps_per_execution 4": spe, "top-k metric + validation": more_metrics,
         "run_eagerly": eager, "jit_compile": jit, "save SavedModel/h5 + load": save_load,
         "mixed_float16": mixed, "second fit at other batch sizes": two_batch_sizes,
         "Embedding + Adam": embedding, "TerminateOnNaN at lr 1e9": nan,
         "validation_freq 2 + evaluate": val_freq}

with tf_hetero.LocalCluster(num_workers=4, num_ps=2) as cluster:
    for name in names:
        print("==", name, flush=True)
        strategy = registry.make(name, cluster.resolver)
        for case, run in CASES.items():
            if only and only not in case:
                continue
            try:
                m = run(strategy)
                print(f"PASS {case}: iterations {int(m.optimizer.iterations.numpy())}", flush=True)
            except Exception as e:
                print(f"FAIL {case}: {type(e).__name__}: {str(e).strip().splitlines()[0][:400]}", flush=True)
        if hasattr(strategy, "shutdown"):
            strategy.shutdown()
