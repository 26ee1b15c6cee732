"""Feasibility probe (issue 49 item 5): worker-driven rounds with a PS-side token barrier
(SyncReplicasOptimizer's design): each worker runs ONE long function looping over rounds
(dequeue its token on the PS, compute, push, signal done); the chief per round only closes
(dequeue N dones, apply) and releases the next tokens: two launches a round whatever N.
    MP=1 .venv/bin/python tokens.py N SLEEP_US ROUNDS      # e.g. MP=1 ... 16 50000 30

Frozen at the commit of this folder's README."""
import os, sys, time, json, threading
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ.setdefault("TF_ENABLE_EAGER_CLIENT_STREAMING_ENQUEUE", "False")
N = int(sys.argv[1]); SLEEP_US = int(sys.argv[2]); R = int(sys.argv[3])
import tensorflow as tf
import tf_hetero
from tf_hetero.emulation.sleep import sleep_op
c = tf_hetero.LocalCluster(N, 1, processes=os.environ.get("MP") == "1").start()
strategy = tf.distribute.ParameterServerStrategy(c.resolver)
PS = "/job:ps/replica:0/task:0"
with tf.device(PS):
    tokens = [tf.queue.FIFOQueue(4, [tf.int32], [[]], shared_name=f"tok{i}") for i in range(N)]
    done = tf.queue.FIFOQueue(4 * N, [tf.int32], [[]], shared_name="done")
    v = tf.Variable(tf.ones([4096]))
    acc = tf.Variable(tf.zeros([4096]))

def work(k):
    with tf.control_dependencies([k]):
        g = tf.reduce_sum(tf.reshape(v.read_value(), [64, 64]), 0)
    if SLEEP_US:
        g = g + tf.cast(sleep_op(tf.constant(SLEEP_US, tf.int64)), tf.float32) * 0
    return tf.tile(g, [64]) * tf.cast(k, tf.float32) * 1e-3

def make_loop(i):
    dev = f"/job:worker/replica:0/task:{i}"
    @tf.function
    def loop(rounds):
        for _ in tf.range(rounds):
            k = tokens[i].dequeue()
            with tf.device(dev):
                g = work(k)
            pushed = acc.assign_add(g)
            with tf.control_dependencies([pushed]):  # done only once the push landed
                done.enqueue(k)
        return tf.constant(0)
    return dev, loop

@tf.function
def release(sizes):
    for i in range(N):
        tokens[i].enqueue(sizes[i])

@tf.function
def close():
    ks = done.dequeue_many(N)
    # Queue and variable ops are ordered per resource only: read the sum after the N dones.
    with tf.control_dependencies([ks]):
        total = acc.read_value()
    v.assign_add(total / tf.cast(tf.reduce_sum(ks), tf.float32))
    acc.assign(tf.zeros_like(acc))
    return tf.reduce_sum(ks)

loops = [make_loop(i) for i in range(N)]
errors = []
def run(dev, loop, rounds):
    try:
        with tf.device(dev):
            loop(tf.constant(rounds)).numpy()
    except Exception as e:  # noqa
        errors.append(repr(e))

def phase(rounds):
    ts = [threading.Thread(target=run, args=(d, l, rounds)) for d, l in loops]
    for t in ts: t.start()
    sizes = tf.ones([N], tf.int32)
    t0, c0 = time.perf_counter(), time.process_time()
    for r in range(rounds):
        release(sizes)
        assert int(close()) == N
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    for t in ts: t.join(60)
    return wall / rounds * 1e3, cpu / rounds * 1e3

phase(3)  # traces, instantiation
w, cpu = phase(R)
# Exact rounds: each averages N pushes made at the model the round released, so
# v = 1.064 ** rounds (a lost, doubled or stale push changes it).
want = 1.064 ** (3 + R)
got = float(v.numpy()[0])
assert abs(got / want - 1) < 1e-4, (got, want)
print(json.dumps({"N": N, "sleep_ms": SLEEP_US / 1e3, "tokens_round_ms": round(w, 2),
                  "chief_cpu_ms": round(cpu, 2), "errors": errors[:2]}), flush=True)
os._exit(0)
