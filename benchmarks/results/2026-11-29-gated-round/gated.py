# Frozen at commit ba431b3: run with `git checkout ba431b3`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""Does a round gated on the PS save the time between a round's close and the next round's
start? 4 workers, 2 PS, 125 ms device time per task, the MLP's real forward/backward, tf_keras
momentum SGD applied on the chief (lean_round.py's 'realopt+logs' round).

  chief : schedule N closures, join, apply on the chief, fetch the losses (the engine today)
  gated : every task first takes a token from a FIFOQueue on PS 0 (a blocking dequeue, all of
          its variable reads depend on it); the chief schedules round r+1's closures as soon
          as round r's tasks are done, *then* applies round r; the apply ends by putting N
          tokens in the queue. A worker's next closure is on its way (RPC, function start,
          iterator) while the apply runs, and its reads wait for the apply's end.
  gated, 2 rounds in flight : the same gate, but round r+1's closures are queued with round
          r's: a worker takes its next one as soon as its own task ends (during the
          barrier), and waits on the PS for round r's apply.

    python gated.py ROUNDS
"""
import sys, time, statistics as st
import numpy as np
import tensorflow as tf
import tf_keras as keras
import tf_hetero
from tf_hetero.emulation.device import sleep_op

N, DEV_US = 4, 125_000
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
rng = np.random.default_rng(0)
X = rng.random((4096, 64)).astype("float32"); Y = rng.integers(0, 10, 4096)

with tf_hetero.LocalCluster(num_workers=N, num_ps=2) as cluster:
    strategy = tf.distribute.ParameterServerStrategy(cluster.resolver)
    coord = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(10)])
        vs = model.trainable_variables
        accs = []
        for v in vs:
            with strategy.extended.colocate_vars_with(v):
                accs.append(tf.Variable(tf.zeros(v.shape), trainable=False))
        opt = keras.optimizers.SGD(0.01, momentum=0.9)
        opt.build(vs)
    with tf.device(vs[0].device):
        queue = tf.queue.FIFOQueue(capacity=64, dtypes=[tf.int64], shapes=[[]])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def dataset_fn():
        return tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(40).prefetch(2)
    it = iter(coord.create_per_worker_dataset(dataset_fn))

    def step(iterator, after):
        xb, yb = next(iterator)
        with tf.control_dependencies(after):
            start = tf.timestamp()
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(yb, model(xb, training=True)))
        grads = tape.gradient(loss, vs)
        writes = [a.assign_add(g) for a, g in zip(accs, grads)]
        with tf.control_dependencies(writes):
            el = tf.cast((tf.timestamp() - start) * 1e6, tf.int64)
            slept = sleep_op(tf.maximum(DEV_US - el, 0))
        with tf.control_dependencies([slept]):
            return tf.identity(loss)

    @tf.function
    def task_chief(iterator):
        return step(iterator, [])

    @tf.function
    def task_gated(iterator):
        return step(iterator, [queue.dequeue()])

    def apply_body():
        mean = [a.read_value() / N for a in accs]
        done = opt.apply_gradients(zip(mean, vs))
        resets = []
        for a, m in zip(accs, mean):
            with tf.control_dependencies([m, done]):
                resets.append(a.assign(tf.zeros_like(a)))
        return resets

    @tf.function
    def apply_chief():
        apply_body()

    @tf.function
    def apply_gated():
        with tf.control_dependencies(apply_body()):
            queue.enqueue_many([tf.zeros([N], tf.int64)])

    @tf.function
    def open_gate():
        queue.enqueue_many([tf.zeros([N], tf.int64)])

    def run_chief(rounds):
        t0 = time.perf_counter()
        for _ in range(rounds):
            rvs = [coord.schedule(task_chief, args=(it,)) for _ in range(N)]
            coord.join()
            apply_chief()
            [rv.fetch() for rv in rvs]
        return 1e3 * (time.perf_counter() - t0) / rounds

    def run_gated(rounds):
        open_gate()
        t0 = time.perf_counter()
        rvs = [coord.schedule(task_gated, args=(it,)) for _ in range(N)]
        for r in range(rounds):
            [rv.fetch() for rv in rvs]          # round r's tasks are done
            if r + 1 < rounds:
                rvs = [coord.schedule(task_gated, args=(it,)) for _ in range(N)]
                apply_gated()                   # their reads wait for its tokens
            else:
                apply_chief()
        ms = 1e3 * (time.perf_counter() - t0) / rounds
        coord.join()
        return ms

    @tf.function
    def drain_gate():
        return queue.dequeue_many(N)

    def run_gated2(rounds):
        open_gate()
        t0 = time.perf_counter()
        inflight = [[coord.schedule(task_gated, args=(it,)) for _ in range(N)]
                    for _ in range(min(2, rounds))]
        for r in range(rounds):
            [rv.fetch() for rv in inflight.pop(0)]   # round r's tasks are done
            apply_gated()                           # round r+1's tasks wait for its tokens
            if r + 2 < rounds:
                inflight.append([coord.schedule(task_gated, args=(it,)) for _ in range(N)])
        ms = 1e3 * (time.perf_counter() - t0) / rounds
        coord.join()
        drain_gate()                                # the last apply's tokens
        return ms

    run_chief(3); run_gated(3); run_gated2(3)
    res = {}
    for rep in range(3):
        for name, f in (("chief: join, apply", run_chief), ("gated: next round before the apply", run_gated),
                        ("gated, 2 rounds in flight", run_gated2)):
            ms = f(ROUNDS)
            res.setdefault(name, []).append(ms)
            print(f"rep {rep} {name:36s} {ms:7.1f} ms/round", flush=True)
    print("\nmedian ms per round (device time 125 ms):")
    for name, v in res.items():
        print(f"  {name:36s} {st.median(v):7.1f}  [{min(v):.1f}-{max(v):.1f}]")
    print("queue size at the end:", int(queue.size().numpy()),
          "accumulators left:", [float(tf.reduce_sum(tf.abs(a)).numpy()) for a in accs])
