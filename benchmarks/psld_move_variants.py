"""Evidence for docs/PSLD.md section 4: ways of moving a variable between PS tasks of a live
ParameterServerStrategy (BSP, 3 workers, 2 PS, in-process cluster), each compared with
large-batch SGD. One variant per run:

    flock /tmp/tf-hetero-heavy.lock .venv/bin/python benchmarks/psld_move_variants.py midfit

midfit: swap the CachingVariable's inner variable (kernel, its momentum slot, its tf-hetero
accumulator) at a round boundary of a running fit, traced functions dropped (the design);
midfit_noretrace: the same without dropping them; midfit_noidle: without waiting for the
rounds in flight; no_keep_id: between two fits, the wrapper takes the new inner variable's
_unique_id; rebind: a new strategy variable assigned to layer.kernel instead of a swap.
(between/no_retrace compare two fits that re-read the same data with one reference: their
error figures are not meaningful.)"""
import time, sys, traceback
import numpy as np
import tf_hetero
import tensorflow as tf, tf_keras as keras
from tensorflow.python.ops.resource_variable_ops import ResourceVariable
VARIANT = sys.argv[1]
cluster = tf_hetero.LocalCluster(3, 2, processes=False).start()
N,B,R=3,8,4
def small(seed=1):
    return keras.Sequential([keras.layers.Dense(4, activation="tanh", input_shape=(5,), kernel_initializer=keras.initializers.GlorotUniform(seed)),
        keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed+1))])
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
rng = np.random.default_rng(0)
x = rng.normal(size=(R*N*B,5)).astype("float32"); y = rng.integers(0,3,R*N*B)
def dsfn(ctx):
    w = tf.distribute.coordinator.experimental_get_current_worker_index()
    xs = tf.reshape(tf.constant(x),(R,N,B,5)); ys=tf.reshape(tf.constant(y),(R,N,B))
    return tf.data.Dataset.from_tensor_slices((tf.gather(xs,w,axis=1), tf.gather(ys,w,axis=1)))
ref = small(); ref.compile(keras.optimizers.SGD(0.1, momentum=0.9), loss)
xs, ys = x.reshape(R,N,B,5), y.reshape(R,N,B)
for k in range(R): ref.train_on_batch(xs[k].reshape(N*B,5), ys[k].reshape(N*B))
ref_w = ref.get_weights()
ref_m = [v.numpy() for v in ref.optimizer.variables if '/m/' in v.name]

strategy = tf_hetero.BSPStrategy(cluster.resolver)
with strategy.scope():
    model = small(); model.compile(keras.optimizers.SGD(0.1, momentum=0.9), loss)
kernel = model.layers[0].kernel
src = kernel.device; dst = "/job:ps/replica:0/task:%d/device:CPU:0" % (1 - int(src.split("task:")[1][0]))

def swap(wrapper, keep_id=True):
    old = wrapper._v
    with tf.device(dst):
        new = ResourceVariable(old.read_value(), trainable=old.trainable, name=old.name.split(":")[0],
                               constraint=old.constraint)
    if keep_id and "_unique_id" not in wrapper.__dict__:
        wrapper._unique_id = old._unique_id
    wrapper._v = new; wrapper._cache = None
    return old

def related(w):
    out = [w]
    opt = model.optimizer
    i = opt._index_dict[opt._var_key(w)]
    for name, val in vars(opt).items():
        if isinstance(val, list) and len(val) == len(opt._index_dict) and all(hasattr(v, "_v") for v in val):
            out.append(val[i])
    for A in strategy.coordinator.tracer.accumulators:
        if A.covers([w]): out.append(A.acc[A.index_of(w)])
    return out

def retrace():
    c = strategy.coordinator
    c.tracer.entries.clear(); c.dispatcher._apply_fns.clear(); c.dispatcher._drain_fns.clear()

graveyard = []
def move():
    ws = related(kernel)
    graveyard.extend(swap(w, keep_id=(VARIANT != "no_keep_id")) for w in ws)
    print("moved", [(w.name, w.device) for w in ws], flush=True)
    if VARIANT not in ("no_retrace", "midfit_noretrace"):
        retrace()

try:
    if VARIANT in ("between", "no_retrace", "no_keep_id"):
        model.fit(keras.utils.experimental.DatasetCreator(dsfn), epochs=1, steps_per_epoch=N*2, verbose=0)
        move()
        model.fit(keras.utils.experimental.DatasetCreator(dsfn), epochs=1, steps_per_epoch=N*2, verbose=0)
    elif VARIANT == "rebind":
        model.fit(keras.utils.experimental.DatasetCreator(dsfn), epochs=1, steps_per_epoch=N*2, verbose=0)
        before = len(model.trainable_variables)
        with strategy.scope():
            new = tf.Variable(kernel.read_value(), name="moved_kernel")
        print("new var on", new.device, "(strategy placement, not the target: tf.device is ignored in scope)")
        with strategy.scope(), tf.device(dst):
            new2 = tf.Variable(kernel.read_value(), name="moved_kernel2")
        print("new2 var on", new2.device)
        model.layers[0].kernel = new2
        print("trainable vars", before, "->", len(model.trainable_variables), [v.name for v in model.trainable_variables])
        model.fit(keras.utils.experimental.DatasetCreator(dsfn), epochs=1, steps_per_epoch=N*2, verbose=0)
    elif VARIANT in ("midfit", "midfit_noidle", "midfit_noretrace"):
        c = strategy.coordinator
        orig = type(c).schedule
        count = [0]
        def schedule(self, fn, args=None, kwargs=None):
            count[0] += 1
            if count[0] == 2 * N + 1:
                if VARIANT != "midfit_noidle":
                    t = time.time(); ok = self.engine.wait_idle(30); print("idle", ok, time.time() - t, flush=True)
                move()
            return orig(self, fn, args, kwargs)
        c.schedule = schedule.__get__(c)
        model.fit(keras.utils.experimental.DatasetCreator(dsfn), epochs=1, steps_per_epoch=N*R, verbose=0)
    got = model.get_weights()
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(got, ref_w))
    print(VARIANT, "max |w - large-batch SGD| =", err, "device", kernel.device, "iterations", int(model.optimizer.iterations.numpy()))
    m = [v for v in model.optimizer.variables if v.name.startswith("SGD/m/")]
    print("slot err", max(float(np.max(np.abs(a.numpy() - b))) for a, b in zip(m, ref_m)))
    print("slot", [(v.name, v.device) for v in model.optimizer.variables])
except Exception as e:
    traceback.print_exc()
    print(VARIANT, "ERROR", type(e).__name__, str(e)[:500])
