"""Feasibility probe (record 0017's token round, issue 49 item 5): ONE traced carrier
function for every worker, running a tf_keras model's forward/backward on the worker's own
per-worker iterator inside a tf.while_loop: each carrier dequeues a lane from a queue on the
PS once, then per round a token from its lane's queue (the N queues' handles stacked into one
resource tensor and gathered by the lane: no trace per worker), computes, pushes into PS
accumulators and enqueues "done". The chief per round: release (N tokens, one function) and
close (dequeue the N dones, apply). Beside it, today's structure: one closure per task,
join, apply. Prints the round (ms) and the chief's CPU per round (ms), each run twice.
    MP=1 .venv/bin/python carrier.py N ROUNDS SLEEP_US        # e.g. MP=1 ... 8 30 50000
Frozen at 1287e49."""
import os, sys, time, json, threading
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
N, R, SLEEP_US = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
import numpy as np
import tensorflow as tf
import tf_keras as keras
import tf_hetero
from tf_hetero.emulation.sleep import sleep_op
c = tf_hetero.LocalCluster(N, 1, processes=os.environ.get("MP") == "1").start()
strategy = tf.distribute.ParameterServerStrategy(c.resolver)
coord = tf.distribute.coordinator.ClusterCoordinator(strategy)
PS = "/job:ps/replica:0/task:0"
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(64, activation="relu", input_shape=(40,)),
                              keras.layers.Dense(10)])
    accs = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]
with tf.device(PS):
    tokens = [tf.queue.FIFOQueue(8, [tf.int64], [[]], shared_name=f"tok{i}") for i in range(N)]
    done = tf.queue.FIFOQueue(8 * N, [tf.int64, tf.float64], [[], []], shared_name="done")
handles = [q.queue_ref for q in tokens]

def dataset_fn():
    x = np.random.default_rng(0).normal(size=(512, 40)).astype("float32")
    y = np.arange(512) % 10
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
per_worker = coord.create_per_worker_dataset(dataset_fn)
it = iter(per_worker)
loss_fn = lambda y, z: tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(y, tf.int32), z))
traces = []

with tf.device(PS):
    lanes = tf.queue.FIFOQueue(N, [tf.int64], [[]], shared_name="lanes")
    stacked = tf.stack(handles)

@tf.function
def carrier(iterator, handles):
    traces.append(1)
    lane = lanes.dequeue()
    with tf.device(PS):
        token_queue = tf.gather(handles, lane)
    n = tf.constant(0, tf.int64)
    while tf.constant(True):
        code = tf.raw_ops.QueueDequeueV2(handle=token_queue, component_types=[tf.int64])[0]
        if code < 0:
            break
        x, y = next(iterator)
        with tf.control_dependencies([code]):  # every model read after the token
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        if SLEEP_US:
            grads = [g + tf.cast(sleep_op(tf.constant(SLEEP_US, tf.int64)), g.dtype) * 0 for g in grads]
        pushed = [a.assign_add(g) for a, g in zip(accs, grads)]
        with tf.control_dependencies(pushed):
            done.enqueue([code, tf.timestamp()])
        n += 1
    return n

@tf.function
def release(codes):
    for i in range(N):
        tokens[i].enqueue(codes[i])

@tf.function
def close(lr):
    ks = done.dequeue_many(N)
    with tf.control_dependencies(ks):
        for v, a in zip(model.trainable_variables, accs):
            v.assign_sub(lr * a.read_value() / N)
            a.assign(tf.zeros_like(a))
    return ks[0]

@tf.function
def plain_step(iterator):  # today's structure: one closure per task
    x, y = next(iterator)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    if SLEEP_US:
        grads = [g + tf.cast(sleep_op(tf.constant(SLEEP_US, tf.int64)), g.dtype) * 0 for g in grads]
    pushed = [a.assign_add(g) for a, g in zip(accs, grads)]
    with tf.control_dependencies(pushed):
        return tf.constant(1)

@tf.function
def apply(lr):
    for v, a in zip(model.trainable_variables, accs):
        v.assign_sub(lr * a.read_value() / N)
        a.assign(tf.zeros_like(a))

lanes.enqueue_many(tf.range(N, dtype=tf.int64))
def token_rounds(rounds):
    results = [coord.schedule(carrier, args=(it, stacked)) for _ in range(N)]
    for r in range(rounds):
        release(tf.fill([N], tf.constant(r, tf.int64)))
        close(tf.constant(0.01))
    release(tf.fill([N], tf.constant(-1, tf.int64)))
    coord.join()
    lanes.enqueue_many(tf.range(N, dtype=tf.int64))
    return [r.fetch() for r in results]

def closure_rounds(rounds):
    for r in range(rounds):
        for _ in range(N):
            coord.schedule(plain_step, args=(it,))
        coord.join()
        apply(tf.constant(0.01))

def timed(fn, rounds):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(rounds)
    return round((time.perf_counter() - t0) / rounds * 1e3, 2), round((time.process_time() - c0) / rounds * 1e3, 2), out

res = {"N": N, "sleep_ms": SLEEP_US / 1e3}
print("warm", timed(token_rounds, 3), timed(closure_rounds, 3), "traces", len(traces), flush=True)
for k in range(2):
    res[f"tokens{k}"] = timed(token_rounds, R)[:2]
    res[f"closures{k}"] = timed(closure_rounds, R)[:2]
res["carrier_traces"] = len(traces)
print(json.dumps(res), flush=True)
os._exit(0)
