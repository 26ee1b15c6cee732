"""PS load max/mean of round-robin vs balanced placement on real clusters (2 and 4 PS).

    flock /tmp/tf-hetero-heavy.lock .venv/bin/python benchmarks/psld_placement.py

Builds each model under ``BSPStrategy(placement=...)`` on a local multi-process cluster (one
worker, 2 or 4 PS tasks), reads where every variable (every shard) landed, and prints the
per-PS bytes one training step moves (variable reads + gradient pushes) and their max/mean.
No training: placement is decided at variable creation. docs/PSLD.md holds the numbers.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def models():
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero

    def skewed():
        inp = keras.Input(shape=(4,), dtype="int32")
        x = keras.layers.Embedding(1024, 16)(inp)  # 64 KB
        x = keras.layers.GlobalAveragePooling1D()(x)
        x = keras.layers.Dense(128, activation="relu")(x)  # 8 KB kernel
        return keras.Model(inp, keras.layers.Dense(10)(x))  # 5 KB kernel

    def embedding_only(shape, dtype):  # the embedding in 16 shards, the rest whole
        big = shape.num_elements() * dtype.size > 32 * 1024
        return [16 if big else 1] + [1] * (len(shape) - 1)

    return {
        "digits MLP 64-128-64-10, no partitioner": (
            lambda: tf_hetero.models.mlp(input_shape=(8, 8, 1)), None),
        "embedding 64 KB + dense 8 KB/5 KB, embedding in 16 shards": (skewed, embedding_only),
        "same, every variable in shards <= 1 KB (MaxSizePartitioner)": (
            skewed, tf.distribute.experimental.partitioners.MaxSizePartitioner(1024)),
    }


def main() -> int:
    import tf_hetero
    from tf_hetero.emulation.ps import bytes_per_ps
    from tf_hetero.policies.placement import Balanced, max_over_mean

    rows = []
    for num_ps in (2, 4):
        with tf_hetero.LocalCluster(1, num_ps, processes=True) as cluster:
            for name, (build, partitioner) in models().items():
                row = {"model": name, "ps": num_ps}
                for placement in ("round_robin", "balanced", "balanced_plan"):
                    # balanced_plan: largest first, from a shapes-only build of the model.
                    chosen = (Balanced(model_fn=build) if placement == "balanced_plan"
                              else placement)
                    strategy = tf_hetero.BSPStrategy(cluster.resolver, partitioner,
                                                     placement=chosen)
                    with strategy.scope():
                        model = build()
                    step = [r + w for r, w in zip(bytes_per_ps(model.variables, num_ps),
                                                  bytes_per_ps(model.trainable_variables, num_ps))]
                    row[placement] = round(max_over_mean(step), 3)
                    row[f"{placement}_bytes"] = step
                    strategy.shutdown()
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n| model | PS | round-robin | balanced (online) | balanced (model_fn, largest first) |"
          "\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['ps']} | {r['round_robin']} | {r['balanced']} | "
              f"{r['balanced_plan']} |")
    sys.stdout.flush()
    os._exit(0)  # no TF teardown at exit (docs/TF_INTERNALS.md §10)


if __name__ == "__main__":
    main()
