"""The rising ceiling (``StepCeiling(regrow=N)``) in the simulator: N workers, the last one 4x
slower, 200 micro-batches per worker, at multiples of the bench's rate, over seeds; one row per
(rate, regrow), 0 being the shipped ceiling that never rises. Frozen at 423145a (the commit
that has ``regrow``; reverted by the next one):

    git checkout 423145a && .venv/bin/python benchmarks/results/2026-12-07-ceiling/regrow_sim.py 8 40 1,2,4 0,16,32,64 OUT.md
"""
import statistics, sys
from tf_hetero.policies import auto as auto_mod
from tf_hetero.policies.stability import StepCeiling
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import Simulation
from tf_hetero.tools.benchconfig import BenchConfig

def fits(n, seeds, lr_factor, regrow, costs):
    auto_mod.StepCeiling = lambda unstable, regrow_=0, **k: StepCeiling(unstable, regrow=regrow)
    out = []
    for seed in range(seeds):
        cfg = BenchConfig(strategies=("auto",), workers=n, profile=f"slow={n - 1}:4",
                          tasks=n * 200, steps_per_epoch=n * 25, seed=seed)
        sim = Simulation("auto", cfg, costs, learn=True, lr_factor=lr_factor)
        r = sim.result(sim.fit())
        ds = r.get("auto_decisions", [])
        b = sum("step at most" in d["why"] and "rises" not in d["why"] for d in ds)
        u = sum("rises" in d["why"] for d in ds)
        out.append((r["time_to_target_s"], r["final_accuracy"], b, u))
    return out

n, seeds = int(sys.argv[1]), int(sys.argv[2])
factors = [float(x) for x in sys.argv[3].split(",")]
regrows = [int(x) for x in sys.argv[4].split(",")]
costs = costs_mod.load()
lines = ["| workers | lr x | regrow | reached 0.9 | median time to 0.9 s | mean time (unreached=max) | mean final acc | under 0.5 | backed off (fits / total) | rises |",
         "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
print(lines[0], flush=True)
for f in factors:
    for rg in regrows:
        runs = fits(n, seeds, f, rg, costs)
        reached = [t for t, *_ in runs if t is not None]
        mx = max(reached) if reached else 0
        lines.append(f"| {n} | {f:g} | {rg} | {len(reached)} / {len(runs)} | "
                     f"{statistics.median(reached) if reached else float('nan'):.1f} | "
                     f"{statistics.mean(t if t is not None else mx for t, *_ in runs):.2f} | "
                     f"{statistics.mean(a for _, a, _, _ in runs):.3f} | {sum(a < 0.5 for _, a, _, _ in runs)} | "
                     f"{sum(b > 0 for *_, b, _ in runs)} / {sum(b for *_, b, _ in runs)} | {sum(u for *_, u in runs)} |")
        print(lines[-1], flush=True)
open(sys.argv[5], "w").write("\n".join(lines) + "\n")
