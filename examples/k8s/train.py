"""The training program of examples/k8s/tfjob.yaml: one file for every pod of the TFJob.

Each pod runs ``tf-hetero launch -- python train.py ARGS``: ``launch`` reads the pod's
TF_CONFIG (set by the Kubeflow training operator), serves on workers and PS, and runs this
program on the chief. The strategy is a registered name (``tf-hetero bench --help`` lists
them), from ``--strategy`` or else the ``TF_HETERO_STRATEGY`` environment variable (default
``hps``); the SGD learning rate follows the benchmark's linear rule (``--base-lr`` x the
micro-batches one update averages).

Try it locally first (this process becomes the chief of a 4-worker, 2-PS cluster)::

    tf-hetero run --workers 4 --ps 2 --profile "slow=3:4" -- python examples/k8s/train.py --epochs 2
"""

import argparse
import os

import tf_hetero  # before TensorFlow: tf-hetero quiets TensorFlow's C++ start-up logs

import numpy as np
import tf_keras as keras
from tf_hetero.strategies import registry

STRATEGY_ENV = "TF_HETERO_STRATEGY"


def main(args):
    resolver = tf_hetero.cluster_resolver()
    strategy = registry.make(args.strategy, resolver)
    workers = resolver.cluster_spec().num_tasks("worker")
    per_update = registry.updates_per_round(args.strategy, workers)
    steps = args.steps
    if registry.entry(registry.parse(args.strategy)[0]).sized:  # whole rounds per epoch
        steps = -(-steps // per_update) * per_update
    train = tf_hetero.data.load(args.dataset, "train")
    test = tf_hetero.data.load(args.dataset, "test")
    with strategy.scope():
        model = tf_hetero.models.build(args.model, input_shape=train.input_shape,
                                       num_classes=train.num_classes)
        model.compile(keras.optimizers.SGD(args.base_lr * per_update, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if os.environ.get("TF_HETERO_PROFILE"):  # emulated heterogeneity (tf-hetero run --profile)
        tf_hetero.emulate(model, strategy=strategy, batch_size=args.batch_size)
    callbacks = [tf_hetero.Progress(interval_s=10.0)]
    if isinstance(strategy, tf_hetero.HeteroStrategy):
        callbacks.insert(0, tf_hetero.MonitorLogs(strategy))
    if args.backup_dir:  # resumes fit after the chief restarts (e.g. after a PS was lost)
        callbacks.append(keras.callbacks.BackupAndRestore(args.backup_dir))
    train_fn = tf_hetero.data.dataset_fn(args.dataset, batch_size=args.batch_size,
                                         num_workers=workers, data=train)
    print(f"train.py: {args.strategy} on {workers} workers, {args.epochs} x {steps} steps, "
          f"lr {args.base_lr * per_update:g}", flush=True)
    model.fit(keras.utils.experimental.DatasetCreator(train_fn), epochs=args.epochs,
              steps_per_epoch=steps, verbose=0, callbacks=callbacks)
    accuracy = np.mean(np.argmax(model(test.x, training=False).numpy(), axis=1) == test.y)
    print(f"train.py: test accuracy {accuracy:.4f}", flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategy", default=os.environ.get(STRATEGY_ENV, "hps"),
                        help=f"a registered strategy name (default: ${STRATEGY_ENV} or hps)")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--base-lr", type=float, default=0.02)
    parser.add_argument("--backup-dir", default=None,
                        help="keras BackupAndRestore folder on storage that survives the pod")
    args = parser.parse_args(argv)
    try:
        registry.parse(args.strategy)
    except ValueError as e:
        parser.error(str(e))
    return args


if __name__ == "__main__":
    tf_hetero.run(main, parse_args())
