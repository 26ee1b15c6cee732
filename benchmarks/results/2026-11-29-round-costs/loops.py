# Frozen at commit ed64128: run with `git checkout ed64128`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""Custom training loops (the TF PS tutorial's shape) under sized strategies, with the three
ways of making the per-worker dataset."""
import sys
import numpy as np
import tf_hetero
import tensorflow as tf
import tf_keras as keras
from tf_hetero.strategies import registry

names = sys.argv[1].split(",")
rng = np.random.default_rng(0)
x = rng.random((1024, 16)).astype("float32"); y = rng.integers(0, 4, 1024)


def ds():
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)


def run(strategy, how):
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
        opt = keras.optimizers.SGD(0.05)
    if how == "dataset_fn":
        per_worker = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(lambda ctx: ds()))
    elif how == "distributed dataset":
        per_worker = coordinator.create_per_worker_dataset(strategy.experimental_distribute_dataset(ds()))
    else:
        per_worker = coordinator.create_per_worker_dataset(ds())
    it = iter(per_worker)

    @tf.function
    def step(iterator):
        def replica(inputs):
            a, b = inputs
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(b, model(a), from_logits=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables))
            return loss
        return strategy.run(replica, args=(next(iterator),))

    for _ in range(16):
        coordinator.schedule(step, args=(it,))
    coordinator.join()
    return int(opt.iterations.numpy())


with tf_hetero.LocalCluster(num_workers=4, num_ps=2) as cluster:
    for name in names:
        for how in ("dataset_fn", "distributed dataset", "raw dataset"):
            strategy = registry.make(name, cluster.resolver)
            try:
                print(f"PASS {name} {how}: iterations {run(strategy, how)}", flush=True)
            except Exception as e:
                print(f"FAIL {name} {how}: {type(e).__name__}: {str(e).strip().splitlines()[0][:400]}", flush=True)
            if hasattr(strategy, "shutdown"):
                strategy.shutdown()
