"""Redraw a bench run's figure (accuracy vs wall time, and each row's per-worker task
timeline) from its JSON, plain or gzipped: the figure ``tf-hetero bench`` writes beside its
JSON, which results folders do not keep.

    python benchmarks/replot.py \
        benchmarks/results/2026-11-29-lean-round/scenarios/one_slow/bench.json.gz one_slow.png

Self-contained (numpy and matplotlib only) so that it keeps working on old runs whatever the
package's report code becomes.
"""

from __future__ import annotations

import argparse
import gzip
import json


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def plot(run: dict, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    results, cfg = run["results"], run["config"]
    n = len(results)
    fig = plt.figure(figsize=(12, 3.2 + 1.1 * n))
    grid = fig.add_gridspec(1 + n, 1, height_ratios=[3] + [1] * n)
    ax = fig.add_subplot(grid[0])
    for r in results:
        curve = np.asarray(r["accuracy_curve"])
        ax.plot(curve[:, 0], curve[:, 1], label=r["strategy"])
    ax.axhline(cfg["target_accuracy"], color="grey", ls=":", lw=1)
    ax.set_xlabel("seconds since fit() was called")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(f"profile {cfg['profile']}: accuracy vs wall time")
    ax.legend(loc="lower right")
    colors = plt.get_cmap("tab10")
    span = max(max(e for _, _, e, _ in r["timeline"]) for r in results)
    for i, r in enumerate(results):
        axt = fig.add_subplot(grid[1 + i])
        for w, s, e, applied in r["timeline"]:
            axt.barh(w, e - s, left=s, height=0.7, color=colors(w % 10) if applied else "lightgrey",
                     edgecolor="white", linewidth=0.2)
        axt.set_xlim(0, span)
        axt.set_yticks(range(cfg["workers"]))
        axt.invert_yaxis()
        axt.set_ylabel(r["strategy"], rotation=0, ha="right", va="center")
        axt.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", help="a bench JSON (bench.json or bench.json.gz)")
    p.add_argument("png")
    a = p.parse_args(argv)
    print(plot(load(a.json), a.png))


if __name__ == "__main__":
    main()
