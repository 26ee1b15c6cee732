"""The velocity at a back-off in the simulator: "scaled" by the new step over the old
(``AutoConfig(restart=False)``) or "reset" to 0 (``restart=True``); N workers, the last one
4x slower, 200 micro-batches per worker, at multiples of the bench's rate, 40 seeds. Written
at 488a19c (the tables here were run with the velocity patched on
``AutoController.velocity``; the rows are the two settings now):

    .venv/bin/python benchmarks/results/2026-12-07-ceiling/restart_sim.py 8 40 1,4,6 OUT.md
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import auto_variants  # noqa: E402  (benchmarks/: registers the auto@k=v rows)
from auto_velocity_sim import fits as seeded_fits  # noqa: E402  (benchmarks/: the seed loop)
from tf_hetero.sim import costs as costs_mod  # noqa: E402

VARIANTS = {"scaled": "auto@restart=False", "reset": "auto@restart=True"}


def fits(n, seeds, f, variant, costs):
    return seeded_fits(n, seeds, f, True, costs, spec=auto_variants._auto_row(VARIANTS[variant]))


n, seeds = int(sys.argv[1]), int(sys.argv[2])
costs = costs_mod.load()
lines = ["| workers | lr x | velocity at a back-off | reached 0.9 | median time to 0.9 s | "
         "mean final acc | under 0.5 | backed off (fits / total) |",
         "|---:|---:|---|---:|---:|---:|---:|---:|"]
print(lines[0], flush=True)
for f in [float(x) for x in sys.argv[3].split(",")]:
    for v in ("scaled", "reset"):
        runs = fits(n, seeds, f, v, costs)
        reached = [t for t, _, _ in runs if t is not None]
        lines.append(f"| {n} | {f:g} | {v} | {len(reached)} / {len(runs)} | "
                     f"{statistics.median(reached) if reached else float('nan'):.1f} | "
                     f"{statistics.mean(a for _, a, _ in runs):.3f} | "
                     f"{sum(a < 0.5 for _, a, _ in runs)} | "
                     f"{sum(b > 0 for *_, b in runs)} / {sum(b for *_, b in runs)} |")
        print(lines[-1], flush=True)
open(sys.argv[4], "w").write("\n".join(lines) + "\n")
