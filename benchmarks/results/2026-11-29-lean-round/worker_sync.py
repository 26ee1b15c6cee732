# Frozen at commit ba7f613: run with `git checkout ba7f613`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""Bound of a worker-driven synchronous round (SyncReplicasOptimizer's design in TF2 PSS):
each worker's closure runs K rounds; a round is read -> compute -> accumulate -> device sleep
-> counter += 1; the worker whose increment completes the round applies the mean on the PS
and puts N tokens in a FIFOQueue on PS 0; every worker takes one token before its next round
(a blocking dequeue on the PS: no polling). Against the engine's structure (a closure per
worker per round, the chief joins them and calls the apply).

    python worker_sync.py ROUNDS    # 4 workers, 2 PS, 125 ms of device time per task
"""
import sys, time, statistics as st
import numpy as np
import tensorflow as tf
import tf_hetero
from tf_hetero.emulation.device import sleep_op

N, DEV_US = 4, 125_000
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 48
SHAPES = [(64, 128), (128,), (128, 10), (10,)]
LR = 0.01

with tf_hetero.LocalCluster(num_workers=N, num_ps=2) as cluster:
    strategy = tf.distribute.ParameterServerStrategy(cluster.resolver)
    coord = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        vs = [tf.Variable(tf.random.normal(s, seed=1) * 0.1) for s in SHAPES]
        accs = []
        for v in vs:
            with strategy.extended.colocate_vars_with(v):
                accs.append(tf.Variable(tf.zeros(v.shape)))
        with strategy.extended.colocate_vars_with(vs[0]):
            counter = tf.Variable(tf.constant(0, tf.int64))
    print("placement", [v.device[-16:] for v in vs], [a.device[-16:] for a in accs], flush=True)
    with tf.device(vs[0].device):
        queue = tf.queue.FIFOQueue(capacity=64, dtypes=[tf.int64], shapes=[[]])

    def compute(after):
        with tf.control_dependencies(after):
            start = tf.timestamp()
            reads = [tf.identity(v) for v in vs]
        grads = [tf.tanh(r) * 0.1 for r in reads]
        writes = [a.assign_add(g) for a, g in zip(accs, grads)]
        with tf.control_dependencies(writes):
            el = tf.cast((tf.timestamp() - start) * 1e6, tf.int64)
            return sleep_op(tf.maximum(DEV_US - el, 0))

    @tf.function
    def task_a():
        slept = compute([])
        with tf.control_dependencies([slept]):
            return tf.constant(1)

    @tf.function
    def apply_a():
        for v, a in zip(vs, accs):
            v.assign_sub(LR * a.read_value() / N)
            a.assign(tf.zeros_like(a))

    def apply_b(k):
        ops = []
        for v, a in zip(vs, accs):
            upd = v.assign_sub(LR * a.read_value() / N)
            with tf.control_dependencies([upd]):
                ops.append(a.assign(tf.zeros_like(a)))
        with tf.control_dependencies(ops):
            enq = queue.enqueue_many([tf.fill([N], tf.constant(k, tf.int64))])
        with tf.control_dependencies([enq]):
            return tf.constant(True)

    def task_b_fn(K):
        @tf.function
        def task_b():
            token = tf.constant(0, tf.int64)
            for k in range(K):
                slept = compute([token])
                with tf.control_dependencies([slept]):
                    n = counter.assign_add(1)
                done = tf.cond(tf.equal(n % N, 0), lambda k=k: apply_b(k), lambda: tf.constant(False))
                with tf.control_dependencies([done]):
                    token = queue.dequeue()
            return token
        return task_b

    def run_a(rounds):
        t0 = time.perf_counter()
        for _ in range(rounds):
            for _ in range(N):
                coord.schedule(task_a)
            coord.join()
            apply_a()
        return (time.perf_counter() - t0) / rounds

    def run_b(rounds, K):
        fn = task_b_fn(K)
        t0 = time.perf_counter()
        for _ in range(rounds // K):
            for _ in range(N):
                coord.schedule(fn)
            coord.join()
        return (time.perf_counter() - t0) / (rounds // K * K)

    # warm up (traces, worker instantiation)
    run_a(2); [run_b(K, K) for K in (1, 4, 8)]
    results = {}
    for rep in range(3):
        for name, f in (("A: chief joins + applies", lambda: run_a(ROUNDS)),
                        ("B K=1: worker applies, PS queue barrier", lambda: run_b(ROUNDS, 1)),
                        ("B K=4", lambda: run_b(ROUNDS, 4)),
                        ("B K=8", lambda: run_b(ROUNDS, 8))):
            c0 = int(counter.numpy())
            ms = 1e3 * f()
            results.setdefault(name, []).append(ms)
            print(f"rep {rep} {name:42s} {ms:7.1f} ms/round  (counter +{int(counter.numpy()) - c0})", flush=True)
    print("\nmedian ms per round (device time 125 ms):")
    for name, v in results.items():
        print(f"  {name:42s} {st.median(v):7.1f}  [{min(v):.1f}-{max(v):.1f}]")
    # Check: B applied exactly one update per round (accumulators empty, queue empty).
    print("accumulators left:", [float(tf.reduce_sum(tf.abs(a)).numpy()) for a in accs],
          "queue size:", int(queue.size().numpy()))
