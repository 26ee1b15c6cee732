# Frozen at commit 0350b31: run with `git checkout 0350b31`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""How long is the leanest chief-driven synchronous round TF allows here, and what does each
real part add? 4 workers, 2 PS, 125 ms device time per task (the fast worker's H-PS task on
one_slow), digits-sized MLP. Variants, each a round = N closures joined + one apply:

  toy      : reads the variables, tanh 'gradients', accumulates, sleeps; apply = 8 PS ops
  real     : + a per-worker dataset iterator (batch 40) and the MLP's real forward/backward
  realopt  : + the apply is tf_keras SGD(momentum=0.9).apply_gradients of the mean
  realopt+logs : + the task returns its loss and the chief fetches it (as Keras logs do)
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

    def make_variant(write):
        @tf.function
        def task(iterator, round_id):
            start = tf.timestamp()
            with tf.control_dependencies([start]):
                xb, yb = next(iterator)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(yb, model(xb, training=True)))
            grads = tape.gradient(loss, vs)
            slept = finish(start, write(grads, round_id))
            with tf.control_dependencies([slept]):
                return tf.identity(loss)
        return task

    def engine_write(grads, round_id):
        return [eng.write({i: (lambda g=g: g) for i, g in enumerate(grads)}, round_id,
                          round_id % 2, current_worker(), 1)]

    real_eng = make_variant(engine_write)

    def scatter_only(grads, round_id):
        idx = tf.stack([round_id % 2, current_worker()])[None]
        ups = []
        for a, g in zip(eng.acc, grads):
            with tf.device(a.device):
                ups.append(a.scatter_nd_update(idx, g[None]))
        return ups

    def static_fresh(grads, round_id):
        lane = current_worker(); slot = round_id % 2
        idx = tf.stack([slot, lane])[None]
        ups = scatter_only(grads, round_id)
        with tf.device(eng.tags.device):
            ups.append(eng.counts.scatter_nd_update([[lane, slot]], tf.constant([1], tf.int64)))
            ups.append(eng.tags.scatter_nd_update([[lane, slot]], round_id[None]))
        return ups

    real_scatter = make_variant(scatter_only)

    class Accumulating(keras.Sequential):
        """Keras's own train_function (its loss tracker, train counter, logs) around a
        step that writes the plain accumulators instead of applying."""
        def train_step(self, data):
            start = tf.timestamp()
            with tf.control_dependencies([start]):
                xb, yb = tf.nest.map_structure(tf.identity, data)
            with tf.GradientTape() as tape:
                y_pred = self(xb, training=True)
                loss = self.compute_loss(xb, yb, y_pred)
            grads = tape.gradient(loss, self.trainable_variables)
            logs = self.compute_metrics(xb, yb, y_pred, None)
            writes = [a.assign_add(g) for a, g in zip(kaccs, grads)]
            slept = finish(start, writes + tf.nest.flatten(logs))
            with tf.control_dependencies([slept]):
                return tf.nest.map_structure(tf.identity, logs)

    with strategy.scope():
        kmodel = Accumulating([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                               keras.layers.Dense(10)])
        kopt = keras.optimizers.SGD(0.01, momentum=0.9)
        kmodel.compile(kopt, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       steps_per_execution=1)
        kaccs = []
        for v in kmodel.trainable_variables:
            with strategy.extended.colocate_vars_with(v):
                kaccs.append(tf.Variable(tf.zeros(v.shape), trainable=False))
        kopt.build(kmodel.trainable_variables)
    kmodel._cluster_coordinator = coord
    kmodel.make_train_function(force=True)

    @tf.function
    def apply_keras():
        kvs = kmodel.trainable_variables
        mean = [a.read_value() / N for a in kaccs]
        kopt.apply_gradients(zip(mean, kvs))
        for a, m in zip(kaccs, mean):
            with tf.control_dependencies([m]):
                a.assign(tf.zeros_like(a))

    def keras_task(iterator):
        return kmodel.train_function(iterator)
    slot_accs = []
    with strategy.scope():
        for v in vs:
            with strategy.extended.colocate_vars_with(v):
                slot_accs.append(tf.Variable(tf.zeros([2] + v.shape.as_list()), trainable=False))

    def slot_add(grads, round_id):
        ups = []
        for a, g in zip(slot_accs, grads):
            with tf.device(a.device):
                ups.append(a.scatter_nd_add([[round_id % 2]], g[None]))
        return ups

    real_slot = make_variant(slot_add)

    @tf.function
    def apply_slot_fn(round_id):
        slot = round_id % 2
        mean = [tf.gather(a, slot) / N for a in slot_accs]
        done = opt.apply_gradients(zip(mean, vs))
        with tf.control_dependencies([done] + mean):
            for a, v in zip(slot_accs, vs):
                a.scatter_nd_update([[slot]], tf.zeros([1] + v.shape.as_list()))

    def apply_slot():
        apply_slot_fn(tf.constant(rid[0], tf.int64))
        rid[0] += 1
    real_static = make_variant(static_fresh)
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
            a = args if args is not None else (it, tf.constant(rid[0], tf.int64))
            if task is keras_task:
                rvs = [keras_task(it) for _ in range(N)]
            else:
                rvs = [coord.schedule(task, args=a) for _ in range(N)]
            coord.join()
            r1 = time.perf_counter()
            apply()
            if fetch:
                [rv.fetch() for rv in rvs]
            r2 = time.perf_counter()
            tj.append(r1 - r0); ta.append(r2 - r1)
        return 1e3 * (time.perf_counter() - t0) / rounds, 1e3 * st.mean(tj), 1e3 * st.mean(ta)

    ONLY = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    variants = {"toy": (toy, (), apply_plain, False), "real": (real, (it,), apply_plain, False),
                "realopt": (real, (it,), apply_opt, False), "realopt+logs": (real, (it,), apply_opt, True),
                "engine accumulators": (real_eng, None, apply_eng, True),
                "engine acc, tags+counts, no tag read": (real_static, None, apply_eng, True),
                "engine acc, lane scatter only": (real_scatter, None, apply_eng, True),
                "slot accumulators [2, shape], no lanes": (real_slot, None, apply_slot, True),
                "keras train_function (plain accumulators)": (keras_task, (it,), apply_keras, True)}
    if ONLY:
        variants = {k: v for k, v in variants.items() if any(k.startswith(o) for o in ONLY)}
    for name, (task, args, apply, fetch) in variants.items():
        run(task, args, apply, fetch, 3)  # trace, instantiate
    res = {}
    for rep in range(3):
        for name, (task, args, apply, fetch) in variants.items():
            r = run(task, args, apply, fetch, ROUNDS)
            res.setdefault(name, []).append(r)
            print(f"rep {rep} {name:38s} round {r[0]:6.1f} ms  (join {r[1]:6.1f}, apply+fetch {r[2]:5.1f})", flush=True)
    print("\nmedian of 3 (ms per round; device time 125):")
    for name, rs in res.items():
        med = sorted(rs)[1]
        print(f"  {name:38s} round {med[0]:6.1f}  join {med[1]:6.1f}  apply+fetch {med[2]:5.1f}")
