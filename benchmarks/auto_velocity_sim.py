"""AutoStrategy's back-off as shipped (the optimizer's momentum restarted) or with the
velocity the unstable steps built kept, in the simulator (its digits-MLP learner; no
TensorFlow): N workers, the last one 4x slower, 200 micro-batches per worker, at one or more
multiples of the bench's learning rate (a higher rate makes the step unstable more often, so
more fits back off), over seeds.

    .venv/bin/python benchmarks/auto_velocity_sim.py 8 40 1,2,4,6 OUT.md

"off" patches ``AutoController.velocity`` to 1 (the velocity the unstable steps built is
kept); "on" is the shipped controller (since docs/decisions/0019 it restarts the momentum,
``AutoConfig(restart=True)``; the tables of benchmarks/results/2026-12-07-velocity/ were run
when it scaled the velocity with the step; the two side by side:
benchmarks/results/2026-12-07-ceiling/restart_sim.py). One table row per (workers, rate
factor, on/off): fits that reached 0.9, the median time to it, the mean final accuracy, fits
that ended under 0.5 (collapsed) and fits that backed off at least once.
"""

from __future__ import annotations

import statistics
import sys

from tf_hetero.policies.auto import AutoController
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import Simulation
from tf_hetero.tools.benchconfig import BenchConfig


def fits(n: int, seeds: int, lr_factor: float, velocity: bool, costs,
         spec: str = "auto") -> list[tuple]:
    """``(time to target or None, final accuracy, back-offs)`` per seed, of the registry row
    ``spec`` (an AutoStrategy; ``velocity=False``: its velocity kept at a back-off)."""
    shipped = AutoController.velocity
    if not velocity:
        AutoController.velocity = lambda self: 1.0
    try:
        out = []
        for seed in range(seeds):
            cfg = BenchConfig(strategies=(spec,), workers=n, profile=f"slow={n - 1}:4",
                              tasks=n * 200, steps_per_epoch=n * 25, seed=seed)
            sim = Simulation(spec, cfg, costs, learn=True, lr_factor=lr_factor)
            r = sim.result(sim.fit())
            backoffs = sum("step at most" in d["why"] for d in r.get("auto_decisions", []))
            out.append((r["time_to_target_s"], r["final_accuracy"], backoffs))
        return out
    finally:
        AutoController.velocity = shipped


def main(n: int, seeds: int, factors: list[float], out: str | None) -> str:
    costs = costs_mod.load()
    lines = ["| workers | lr x | velocity at a back-off | reached 0.9 | median time to 0.9 s | "
             "mean final accuracy | ended under 0.5 | backed off |",
             "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for factor in factors:
        for velocity in (False, True):
            runs = fits(n, seeds, factor, velocity, costs)
            reached = [t for t, _, _ in runs if t is not None]
            median = f"{statistics.median(reached):.1f}" if reached else "-"
            lines.append(
                f"| {n} | {factor:g} | {'shipped' if velocity else 'kept'} | "
                f"{len(reached)} / {len(runs)} | {median} | "
                f"{statistics.mean(a for _, a, _ in runs):.3f} | "
                f"{sum(a < 0.5 for _, a, _ in runs)} | {sum(b > 0 for _, _, b in runs)} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if out:
        with open(out, "w") as f:
            f.write(text)
    return text


if __name__ == "__main__":
    print(main(int(sys.argv[1]), int(sys.argv[2]), [float(x) for x in sys.argv[3].split(",")],
               sys.argv[4] if len(sys.argv) > 4 else None))
