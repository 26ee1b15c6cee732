"""The chief's CPU per fit step, by thread (issue 49 items 2 and 4): a multi-process
LocalCluster of N workers and 1 PS, a tiny tf_keras model, no emulated device time; the
second fit (ROUNDS x N steps) is timed, each chief thread's CPU read from /proc.

    .venv/bin/python fit_chief.py N STRATEGY ROUNDS      # e.g. 4 hps 100
    PROF=1 ...                                          # + a yappi profile (pip install yappi)

Frozen at the commit of this folder's README.
"""
import os, sys, time, json, threading
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
N = int(sys.argv[1]); name = sys.argv[2]; ROUNDS = int(sys.argv[3])
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
s = registry.make(name, c.resolver)
with s.scope():
    m = keras.Sequential([keras.layers.Dense(16, activation="tanh", input_shape=(5,)), keras.layers.Dense(3)])
    m.compile(keras.optimizers.SGD(0.01, momentum=0.9), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
data = keras.utils.experimental.DatasetCreator(dsfn)
m.fit(data, epochs=1, steps_per_epoch=4 * N, verbose=0)
steps = ROUNDS * N
# per-thread CPU
def thread_cpu():
    out = {}
    for t in os.listdir(f"/proc/self/task"):
        try:
            st = open(f"/proc/self/task/{t}/stat").read()
            comm = open(f"/proc/self/task/{t}/comm").read().strip()
        except OSError:
            continue
        f = st.rsplit(")", 1)[1].split()
        out[(t, comm)] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return out
before = thread_cpu()
import yappi
prof = os.environ.get("PROF")
if prof:
    yappi.set_clock_type("cpu")
t = time.perf_counter(); cpu = time.process_time()
if prof: yappi.start(builtins=False)
m.fit(data, epochs=1, steps_per_epoch=steps, verbose=0)
if prof: yappi.stop()
wall, cpu = time.perf_counter() - t, time.process_time() - cpu
after = thread_cpu()
print(json.dumps({"N": N, name: {"wall_ms_per_step": round(wall/steps*1e3, 2), "chief_cpu_ms_per_step": round(cpu/steps*1e3, 2)}}))
import collections
pyname = {str(t.native_id): t.name for t in threading.enumerate()}
import re
byname = collections.Counter()
for k, v in after.items():
    n = pyname.get(k[0], k[1])
    n = re.sub(r"\d+", "#", n)
    byname[n] += v - before.get(k, 0)
for n, v in byname.most_common(12):
    print(f"  {n:20s} {v/steps*1e3:6.2f} ms/step")
if prof:
    for t in yappi.get_thread_stats():
        print("THREAD", t.name, t.id, round(t.ttot, 2))
    stats = yappi.get_func_stats()
    stats.sort("ttot")
    for f in list(stats)[:70]:
        print(f"{f.ttot/steps*1e3:7.3f} tot {f.tsub/steps*1e3:7.3f} sub {f.ncall:7d}  {f.module.split('site-packages/')[-1].split('/work/main/')[-1]}:{f.lineno} {f.name}")
os._exit(0)
