"""Feasibility probe (issue 49 item 5, record 0017's next design): pre-launched closures gated
by PS-side tokens. Every task stays one ClusterCoordinator closure (failure isolation, the
worker hooks, per-task results), but the next round's closures are scheduled when the
current round is released: each worker thread launches its next closure as soon as its
current one returns, and the closure's first op is a blocking dequeue of a token from a
queue on the PS, every model read after it. The chief per round: close (dequeue the N
"done" tokens, apply) and release (enqueue N tokens), as tokens.py; the launches overlap
the barrier and the apply instead of following them.
    MP=1 .venv/bin/python prelaunch.py N SLEEP_US ROUNDS      # e.g. MP=1 ... 16 50000 30
Frozen at the commit that adds it to this folder (see README, section 6).
Prints one JSON line: the round (ms) and the chief's CPU per round (ms), each run twice
in one process on one cluster (the second run's figures): ``closures`` (today's
structure: launched once the round is released, after the apply), ``gated_at_close`` (launched once the round closed, their reads
gated by the tokens the chief releases after the apply: the launches overlap the apply) and
``prelaunched`` (launched as soon as their worker is free: the launches overlap the round).
One token queue for all workers (a probe: a runtime would give each worker its own, so a
late launch cannot take another round's token); the closed-form check held in every run."""
import os, sys, time, json
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ.setdefault("TF_ENABLE_EAGER_CLIENT_STREAMING_ENQUEUE", "False")
N = int(sys.argv[1]); SLEEP_US = int(sys.argv[2]); R = int(sys.argv[3])
import tensorflow as tf
import tf_hetero
from tf_hetero.emulation.sleep import sleep_op
c = tf_hetero.LocalCluster(N, 1, processes=os.environ.get("MP") == "1").start()
strategy = tf.distribute.ParameterServerStrategy(c.resolver)
coord = tf.distribute.coordinator.ClusterCoordinator(strategy)
PS = "/job:ps/replica:0/task:0"
with strategy.scope():
    v = tf.Variable(tf.ones([4096]))
    acc = tf.Variable(tf.zeros([4096]))
with tf.device(PS):
    tokens = tf.queue.FIFOQueue(4 * N, [tf.int32], [[]], shared_name="tok")
    done = tf.queue.FIFOQueue(4 * N, [tf.int32], [[]], shared_name="done")


def work(k):
    with tf.control_dependencies([k]):  # every model read after the token
        g = tf.reduce_sum(tf.reshape(v.read_value(), [64, 64]), 0)
    if SLEEP_US:
        g = g + tf.cast(sleep_op(tf.constant(SLEEP_US, tf.int64)), tf.float32) * 0
    return tf.tile(g, [64]) * tf.cast(k, tf.float32) * 1e-3


@tf.function
def plain_step():  # today: launched once the round is released; no token
    pushed = acc.assign_add(work(tf.constant(1)))
    with tf.control_dependencies([pushed]):
        return tf.constant(1)


@tf.function
def gated_step():  # pre-launched: waits for its token on the PS
    k = tokens.dequeue()
    pushed = acc.assign_add(work(k))
    with tf.control_dependencies([pushed]):  # done only once the push landed
        done.enqueue(k)
    return k


@tf.function
def apply(total_k):
    with tf.control_dependencies([total_k]):
        total = acc.read_value()
    v.assign_add(total / tf.cast(total_k, tf.float32))
    acc.assign(tf.zeros_like(acc))
    return total_k


@tf.function
def release(sizes):
    tokens.enqueue_many(sizes)


@tf.function
def close():
    ks = done.dequeue_many(N)  # the N pushes landed
    return apply(tf.reduce_sum(ks))


def closures_rounds(rounds):
    for _ in range(rounds):
        for _ in range(N):
            coord.schedule(plain_step)
        coord.join()
        apply(tf.constant(N))


def prelaunched_rounds(rounds):
    sizes = tf.ones([N], tf.int32)
    for _ in range(N):
        coord.schedule(gated_step)  # round 0's closures launch and wait
    for r in range(rounds):
        release(sizes)
        if r + 1 < rounds:
            for _ in range(N):  # the next round's: each launches when its worker is free
                coord.schedule(gated_step)
        assert int(close()) == N
    coord.join()


def gated_at_close_rounds(rounds):
    """The next round's closures scheduled once the round closed, before its apply: their
    launches overlap the apply (the engine's overlapped rounds, with the reads gated)."""
    sizes = tf.ones([N], tf.int32)
    for _ in range(N):
        coord.schedule(gated_step)
    release(sizes)
    for r in range(rounds):
        ks = done.dequeue_many(N)  # the close: the N pushes landed
        if r + 1 < rounds:
            for _ in range(N):
                coord.schedule(gated_step)
        assert int(apply(tf.reduce_sum(ks))) == N
        if r + 1 < rounds:
            release(sizes)
    coord.join()


def timed(fn, rounds):
    t0, c0 = time.perf_counter(), time.process_time()
    fn(rounds)
    return (round((time.perf_counter() - t0) / rounds * 1e3, 2),
            round((time.process_time() - c0) / rounds * 1e3, 2))


out = {"N": N, "sleep_ms": SLEEP_US / 1e3}
applied = 0
for name, fn in (("closures", closures_rounds), ("gated_at_close", gated_at_close_rounds),
                 ("prelaunched", prelaunched_rounds)) * 2:
    fn(3)  # traces, first-call instantiation
    out[name] = timed(fn, R)
    applied += 3 + R
# Exact: every round averages N pushes made at the model the round released: v = 1.064 **
# rounds (a lost, doubled or early push, a read before the apply, changes it).
want, got = 1.064 ** applied, float(v.numpy()[0])
assert abs(got / want - 1) < 1e-3, (got, want)
print(json.dumps(out), flush=True)
os._exit(0)
