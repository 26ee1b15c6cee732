"""Frozen at commit 20b9087 (tf-hetero). How long a process-mode LocalCluster takes to
listen, and a killed worker to listen again after ``restart`` (docs/TF_INTERNALS.md,
"Forking servers": 2.6 s and 0.13 s here with the fork server; 9.1-10.1 s to start before
it, at 2cd7c93):

    .venv/bin/python benchmarks/results/2026-12-05-suite-time/cluster_start.py
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tf_hetero  # noqa: E402


def main():
    t0 = time.perf_counter()
    cluster = tf_hetero.LocalCluster(3, 2).start()
    print(f"3 workers, 2 PS listening after {time.perf_counter() - t0:.2f} s")
    cluster.kill("worker", 1)
    t1 = time.perf_counter()
    cluster.restart("worker", 1)
    print(f"worker 1 listening again {time.perf_counter() - t1:.2f} s after restart")
    cluster.stop()


if __name__ == "__main__":
    main()
