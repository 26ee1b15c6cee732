"""Elastic PS scale-out in the middle of ``model.fit`` (docs/PSLD.md section 5).

TensorFlow cannot add a task to a running cluster, so the cluster lists every PS task the
fit may use and the extra ones stand by: this program starts on PS 0 alone
(``strategy.scale_ps(1)``), and after epoch ``--scale-after`` a callback calls
``strategy.scale_ps(2)``: at the next round boundary, variables with their optimizer slots
and accumulators move so that PS 1 takes half the load. Run it as the chief of a local
cluster whose PS tasks are the bottleneck (each serves 2 MB/s)::

    tf-hetero run --workers 4 --ps 2 --profile "base_ms=30;ps_mbps=2" -- \\
        python examples/elastic_ps.py

It prints the rounds per second of each epoch and where the variables are.
"""

import argparse
import time

import tf_keras as keras

import tf_hetero
from tf_hetero.policies.placement import ps_index


def main(args):
    resolver = tf_hetero.cluster_resolver()
    strategy = tf_hetero.BSPStrategy(resolver, rebalance=True)
    strategy.scale_ps(1)  # PS 1 stands by: every variable is created on PS 0
    num_workers = resolver.cluster_spec().num_tasks("worker")
    train = tf_hetero.data.load("digits", "train")
    with strategy.scope():
        model = tf_hetero.models.mlp(input_shape=train.input_shape)
        model.compile(keras.optimizers.SGD(0.02 * num_workers, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tf_hetero.emulate(model, strategy=strategy)  # profile from `tf-hetero run --profile`

    def where():
        return sorted({ps_index(v.device) for v in model.trainable_variables})

    class ScaleOut(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0, self.rounds = time.perf_counter(), len(strategy.monitor.rounds)

        def on_epoch_end(self, epoch, logs=None):
            rounds = len(strategy.monitor.rounds) - self.rounds
            print(f"epoch {epoch + 1}: {rounds / (time.perf_counter() - self.t0):.2f} rounds/s, "
                  f"variables on PS {where()}", flush=True)
            if epoch + 1 == args.scale_after:
                print("scale_ps(2): PS 1 joins at the next round boundary", flush=True)
                strategy.scale_ps(2)

    train_fn = tf_hetero.data.dataset_fn(batch_size=32, num_workers=num_workers, data=train)
    model.fit(keras.utils.experimental.DatasetCreator(train_fn), epochs=args.epochs,
              steps_per_epoch=args.steps, verbose=0, callbacks=[ScaleOut()])
    print("moves:", [(m[1], m[2], m[3]) for m in strategy.rebalancer.moves])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=80, help="steps per epoch")
    parser.add_argument("--scale-after", type=int, default=1, help="epoch after which to scale")
    tf_hetero.run(main, parser.parse_args())
