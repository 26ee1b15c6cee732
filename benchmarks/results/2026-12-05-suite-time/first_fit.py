"""Frozen at commit 20b9087 (tf-hetero). The fit of a model a strategy has not trained yet:
its wall time, each task's start and end, and when the first apply was traced ("ahead" or
"at close") and run. The A/B of the trace ahead (docs/TF_INTERNALS.md, "Where a fit's first
second goes") ran this at 2337060 and at b54028c (before it), one after the other:

    PROCESSES=1 .venv/bin/python benchmarks/results/2026-12-05-suite-time/first_fit.py \
        bsp hps bsp hps bsp hps bsp hps bsp hps bsp hps

Run from the repository's root (it imports tests/support's small model). PROCESSES=1: a
multi-process LocalCluster (3 workers, 2 PS); otherwise in-process servers."""

import os
import statistics
import sys
import time

sys.path.insert(0, "tests")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tf_keras as keras  # noqa: E402

import tf_hetero  # noqa: E402
from tf_hetero.strategies import registry  # noqa: E402
from support import small  # noqa: E402

B, N = 8, 3


def fit(cluster, name, seed):
    strategy = registry.make(name, cluster.resolver)
    with strategy.scope():
        model = small.model(seed)
        model.compile(keras.optimizers.SGD(0.1), small.loss())
    t0 = time.perf_counter()
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B)), epochs=1,
              steps_per_epoch=2 * N, verbose=0)
    return strategy, t0, time.perf_counter()


def main(names):
    cluster = tf_hetero.LocalCluster(N, 2, processes=os.environ.get("PROCESSES") == "1").start()
    for name in ("pss", "bsp", "hps"):  # warm the process: the first fits convert code
        fit(cluster, name, 1)
    walls = {}
    for name in names:
        strategy, t0, t1 = fit(cluster, name, 2)
        walls.setdefault(name, []).append(t1 - t0)
        print(f"=== {name}: fit {t1 - t0:.3f} s")
        monitor = getattr(strategy, "monitor", None)
        for t in sorted(monitor.tasks if monitor else [], key=lambda t: t.start):
            print(f"  task w{t.worker} r{t.round} {t.start - t0:.3f}-{t.end - t0:.3f}")
        dispatcher = getattr(strategy._cluster_coordinator, "dispatcher", None)  # pylint: disable=protected-access
        if dispatcher is not None:
            print("  apply traces", [(w, round(s, 3)) for w, s in dispatcher.apply_traces])
            for r, sub, called, end in strategy._cluster_coordinator.applier.timings:  # pylint: disable=protected-access
                print(f"  apply r{r} submitted {sub - t0:.3f} called {called - t0:.3f} "
                      f"end {end - t0:.3f}")
    for name, values in walls.items():
        print(f"{name}: median {statistics.median(values):.3f} s of {len(values)}: "
              f"{[round(v, 2) for v in values]}")
    cluster.stop()


if __name__ == "__main__":
    main(sys.argv[1:] or ["bsp", "hps"])
