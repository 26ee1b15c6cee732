"""The chief's CPU per fit step in model.fit, by strategy and N (issue 49 item 4): a
multi-process cluster of N workers and 1 PS, a tiny model, no emulated device time; the
second fit (ROUNDS x N steps) timed.

    .venv/bin/python fit_chief_by_n.py N pss,bsp,hps ROUNDS      # e.g. 16 pss,bsp,hps 40

Frozen at the commit of this folder's README."""
import os, sys, time, json
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
N = int(sys.argv[1]); names = sys.argv[2].split(","); ROUNDS = int(sys.argv[3])
import numpy as np
import tensorflow as tf
import tf_keras as keras
import tf_hetero
from tf_hetero.strategies import registry
from tf_hetero.data import without_autotune
c = tf_hetero.LocalCluster(N, 1).start()
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 5)).astype("float32"); y = rng.integers(0, 3, 4096)
def dsfn(ctx=None):
    return without_autotune(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32))
out = {"N": N}
for name in names:
    s = registry.make(name, c.resolver)
    with s.scope():
        m = keras.Sequential([keras.layers.Dense(16, activation="tanh", input_shape=(5,)),
                              keras.layers.Dense(3)])
        m.compile(keras.optimizers.SGD(0.01, momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = keras.utils.experimental.DatasetCreator(dsfn)
    steps = ROUNDS * N
    m.fit(data, epochs=1, steps_per_epoch=4 * N, verbose=0)
    t, cpu = time.perf_counter(), time.process_time()
    m.fit(data, epochs=1, steps_per_epoch=steps, verbose=0)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    out[name] = {"steps": steps, "wall_ms_per_step": round(wall / steps * 1e3, 2),
                 "chief_cpu_ms_per_step": round(cpu / steps * 1e3, 2)}
    getattr(s, "shutdown", lambda: None)()
print(json.dumps(out), flush=True)
c.stop() if hasattr(c, "stop") else None
os._exit(0)
