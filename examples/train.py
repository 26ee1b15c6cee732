"""A training program for a real TF_CONFIG cluster, in the single-binary style.

Run it on a local cluster (this process becomes the chief)::

    tf-hetero run --workers 4 --ps 2 --profile "slow=3:4" -- python examples/train.py

or start the same file in every task of a real cluster, each with its own TF_CONFIG
(workers and PS serve, the chief trains)::

    TF_CONFIG='{"cluster": {...}, "task": {"type": "worker", "index": 0}}' python examples/train.py
"""

import argparse

import numpy as np
import tensorflow as tf
import tf_keras as keras

import tf_hetero


def main(args):
    resolver = tf_hetero.cluster_resolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    num_workers = resolver.cluster_spec().num_tasks("worker")
    train, test = tf_hetero.data.load("digits", "train"), tf_hetero.data.load("digits", "test")
    with strategy.scope():
        model = tf_hetero.models.mlp(input_shape=train.input_shape)
        model.compile(keras.optimizers.Adam(1e-3),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    device = tf_hetero.emulate(model, strategy=strategy)  # profile from `tf-hetero run --profile`
    train_fn = tf_hetero.data.dataset_fn(batch_size=32, num_workers=num_workers, data=train)
    model.fit(keras.utils.experimental.DatasetCreator(train_fn), epochs=args.epochs,
              steps_per_epoch=args.steps, verbose=0, callbacks=[tf_hetero.Progress()])
    accuracy = np.mean(np.argmax(model(test.x).numpy(), axis=1) == test.y)
    print(f"tasks per worker: {device.tasks_per_worker()}")
    print(f"test accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=50)
    tf_hetero.run(main, parser.parse_args())
