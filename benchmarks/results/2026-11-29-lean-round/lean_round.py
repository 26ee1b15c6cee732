"""How long is the leanest chief-driven synchronous round TF allows here, and what does each
real part add? 4 workers, 2 PS, 125 ms device time per task (the fast worker's H-PS task on
one_slow), digits-sized MLP. Variants, each a round = N closures joined + one apply:

  toy      : reads the variables, tanh 'gradients', accumulates, sleeps; apply = 8 PS ops
  real     : + a per-worker dataset iterator (batch 40) and the MLP's real forward/backward
  realopt  : + the apply is tf_keras SGD(momentum=0.9).apply_gradients of the mean
  realopt+logs : + the task returns its loss and the chief fetches it (as Keras logs do)
  engine accumulators : + the task writes through tf-hetero's Accumulators.write and the
                 apply is Accumulators.make_apply_fn (run with the repo on PYTHONPATH)
"""
import sys, time, statistics as st
import numpy as np
import tensorflow as tf
import tf_keras as keras
import tf_hetero
from tf_hetero.emulation.device import sleep_op

N, DEV_US, ROUNDS = 4, 125_000, int(sys.argv[1]) if len(sys.argv) > 1 else 40
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
    from tf_hetero.strategies.runtime.accumulate import Accumulators, current_worker
    eng = Accumulators(strategy, vs, N)
    eng_apply = eng.make_apply_fn(opt)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def dataset_fn():
        return tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(40).prefetch(2)
    it = iter(coord.create_per_worker_dataset(dataset_fn))

    def finish(start, writes):
        with tf.control_dependencies(writes):
            el = tf.cast((tf.timestamp() - start) * 1e6, tf.int64)
            return sleep_op(tf.maximum(DEV_US - el, 0))

    @tf.function
    def toy():
        start = tf.timestamp()
        with tf.control_dependencies([start]):
            grads = [tf.tanh(tf.identity(v)) * 0.1 for v in vs]
        slept = finish(start, [a.assign_add(g) for a, g in zip(accs, grads)])
        with tf.control_dependencies([slept]):
            return tf.constant(0.0)

    @tf.function
    def real(iterator):
        start = tf.timestamp()
        with tf.control_dependencies([start]):
            xb, yb = next(iterator)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(yb, model(xb, training=True)))
        grads = tape.gradient(loss, vs)
        slept = finish(start, [a.assign_add(g) for a, g in zip(accs, grads)])
        with tf.control_dependencies([slept]):
            return tf.identity(loss)

    @tf.function
    def real_eng(iterator, round_id):
        start = tf.timestamp()
        with tf.control_dependencies([start]):
            xb, yb = next(iterator)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(yb, model(xb, training=True)))
        grads = tape.gradient(loss, vs)
        wrote = eng.write({i: (lambda g=g: g) for i, g in enumerate(grads)}, round_id,
                          round_id % 2, current_worker(), 1)
        slept = finish(start, [wrote])
        with tf.control_dependencies([slept]):
            return tf.identity(loss)

    rid = [0]

    def apply_eng():
        r = rid[0]
        w = np.zeros((N, 2), np.float32); e = np.full((N, 2), -2, np.int64)
        w[:, r % 2] = 1.0; e[:, r % 2] = r
        eng_apply(tf.constant(w), tf.constant(e), tf.constant(1.0)).numpy()
        rid[0] += 1

    @tf.function
    def apply_plain():
        for v, a in zip(vs, accs):
            v.assign_sub(0.01 * a.read_value() / N)
            a.assign(tf.zeros_like(a))

    @tf.function
    def apply_opt():
        mean = [a.read_value() / N for a in accs]
        opt.apply_gradients(zip(mean, vs))
        for a, m in zip(accs, mean):
            with tf.control_dependencies([m]):
                a.assign(tf.zeros_like(a))

    def run(task, args, apply, fetch, rounds):
        tj, ta = [], []
        t0 = time.perf_counter()
        for _ in range(rounds):
            r0 = time.perf_counter()
            a = args if task is not real_eng else (it, tf.constant(rid[0], tf.int64))
            rvs = [coord.schedule(task, args=a) for _ in range(N)]
            coord.join()
            r1 = time.perf_counter()
            apply()
            if fetch:
                [rv.fetch() for rv in rvs]
            r2 = time.perf_counter()
            tj.append(r1 - r0); ta.append(r2 - r1)
        return 1e3 * (time.perf_counter() - t0) / rounds, 1e3 * st.mean(tj), 1e3 * st.mean(ta)

    variants = {"toy": (toy, (), apply_plain, False), "real": (real, (it,), apply_plain, False),
                "realopt": (real, (it,), apply_opt, False), "realopt+logs": (real, (it,), apply_opt, True),
                "engine accumulators": (real_eng, None, apply_eng, True)}
    for name, (task, args, apply, fetch) in variants.items():
        run(task, args, apply, fetch, 3)  # trace, instantiate
    res = {}
    for rep in range(3):
        for name, (task, args, apply, fetch) in variants.items():
            r = run(task, args, apply, fetch, ROUNDS)
            res.setdefault(name, []).append(r)
            print(f"rep {rep} {name:14s} round {r[0]:6.1f} ms  (join {r[1]:6.1f}, apply+fetch {r[2]:5.1f})", flush=True)
    print("\nmedian of 3 (ms per round; device time 125):")
    for name, rs in res.items():
        med = sorted(rs)[1]
        print(f"  {name:14s} round {med[0]:6.1f}  join {med[1]:6.1f}  apply+fetch {med[2]:5.1f}")
