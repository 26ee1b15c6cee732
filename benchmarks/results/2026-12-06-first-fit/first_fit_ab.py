"""Frozen at commit be8f305 (tf-hetero). The fit of a model a strategy has not trained yet,
wall and CPU seconds (the whole process's: the in-process servers included), repeats
interleaved across the strategies, medians printed:

    TREE=/path/to/a/work/tree/of/a/commit LABEL=name \\
        .venv/bin/python benchmarks/results/2026-12-06-first-fit/first_fit_ab.py pss asp bsp hps

Run from the repository's root (it imports tests/support's small model). TREE: import
tf_hetero from that work tree (``git worktree add --detach DIR COMMIT``) instead of the one
the editable install points at; unset: the installed one. An in-process LocalCluster, 3
workers, 2 PS; SGD with momentum 0.9 (momentum slots: what an optimizer builds); each
repeat a new model, 6 steps."""

import os
import statistics
import sys
import time

sys.path.insert(0, "tests")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if os.environ.get("TREE"):  # the editable install's finder, pointed at another tree
    import __editable___tf_hetero_0_1_0_finder as finder  # pylint: disable=import-error

    tree = os.environ["TREE"]
    finder.MAPPING.update({"tf_hetero": f"{tree}/tf_hetero", "tf_hetero.models": f"{tree}/models",
                           "tf_hetero.strategies": f"{tree}/strategies"})

import tf_keras as keras  # noqa: E402

import tf_hetero  # noqa: E402
from tf_hetero.strategies import registry  # noqa: E402
from support import small  # noqa: E402

B, N, REPEATS = 8, 3, 5


def fit(cluster, name, seed):
    strategy = registry.make(name, cluster.resolver)
    with strategy.scope():
        model = small.model(seed)
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9), small.loss())
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B)), epochs=1,
              steps_per_epoch=2 * N, verbose=0)
    return time.perf_counter() - t0, time.process_time() - c0


def main(names):
    print("tf_hetero from", os.path.dirname(tf_hetero.__file__), flush=True)
    cluster = tf_hetero.LocalCluster(N, 2).start()
    for name in ("pss", "bsp", "hps", "asp"):  # warm the process: the first fits convert code
        fit(cluster, name, 1)
    runs = {}
    for i in range(REPEATS):
        for name in names:
            runs.setdefault(name, []).append(fit(cluster, name, 3 + i))
    label = os.environ.get("LABEL", "")
    for name, r in runs.items():
        print(f"{label} {name}: wall median {statistics.median(a for a, _ in r):.3f} s, "
              f"CPU median {statistics.median(c for _, c in r):.3f} s; "
              f"walls {[round(a, 2) for a, _ in r]}", flush=True)
    sys.stdout.flush()
    os._exit(0)  # the cluster's servers die with the process


if __name__ == "__main__":
    main(sys.argv[1:] or ["pss", "asp", "bsp", "hps"])
