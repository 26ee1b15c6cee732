"""Feasibility probe: one round of N tasks launched as N ClusterCoordinator closures vs one
multi-device function that fans out to the N workers (issue 49 item 5).
    MP=1 .venv/bin/python fanout.py N SLEEP_US ROUNDS      # e.g. MP=1 ... 16 50000 30

Frozen at the commit of this folder's README."""
import os, sys, time, json
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ.setdefault("TF_ENABLE_EAGER_CLIENT_STREAMING_ENQUEUE", "False")
N = int(sys.argv[1]); SLEEP_US = int(sys.argv[2]) if len(sys.argv) > 2 else 0
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 30
import tensorflow as tf
import tf_hetero
from tf_hetero.emulation.sleep import sleep_op
c = tf_hetero.LocalCluster(N, 1, processes=os.environ.get("MP") == "1").start()
strategy = tf.distribute.ParameterServerStrategy(c.resolver)
coord = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    v = tf.Variable(tf.ones([4096]))
    acc = tf.Variable(tf.zeros([4096]))

def work():
    g = tf.reduce_sum(tf.reshape(v.read_value(), [64, 64]), 0)
    if SLEEP_US:
        g = g + tf.cast(sleep_op(tf.constant(SLEEP_US, tf.int64)), tf.float32) * 0
    return tf.tile(g, [64])

@tf.function
def step():
    acc.assign_add(work())
    return tf.constant(1)

@tf.function
def fan():
    for i in range(N):
        with tf.device(f"/job:worker/replica:0/task:{i}"):
            g = work()
        acc.assign_add(g)
    return acc.read_value()[0]

def closures():
    for _ in range(N):
        coord.schedule(step)
    coord.join()

def fanned():
    fan().numpy()

out = {"N": N, "sleep_ms": SLEEP_US / 1e3}
for name, fn in (("closures", closures), ("fanout", fanned), ("closures", closures), ("fanout", fanned)):
    for _ in range(3):
        fn()  # warm: traces, first-call instantiation
    t, cpu = time.perf_counter(), time.process_time()
    for _ in range(ROUNDS):
        fn()
    wall = (time.perf_counter() - t) / ROUNDS * 1e3
    cpu = (time.process_time() - cpu) / ROUNDS * 1e3
    out[name] = (round(wall, 2), round(cpu, 2))
print(json.dumps(out), flush=True)
os._exit(0)
