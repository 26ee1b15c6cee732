"""The uncontended projection on one_slow over a run 10x longer (issue 49: does a long fit close H-PS's gap to stock PSS at 4 workers?). Frozen at e91775d.
    .venv/bin/python benchmarks/results/2026-12-07-token-sweep/unc_long.py"""
import statistics, sys
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import simulate_run
from tf_hetero.tools.benchconfig import BenchConfig
unc = costs_mod.load(costs_mod.UNCONTENDED_PATH)
for tasks, spe in ((1600, 200), (16000, 2000)):
    out = {}
    for spec in ("pss", "hps", "hpsoverlap", "bsp"):
        runs = [simulate_run(spec, BenchConfig(strategies=(spec,), profile="slow=3:4", dataset="mnist1d",
                model="cnn1d", tasks=tasks, steps_per_epoch=spe, target_accuracy=0.8, seed=s), unc)
                for s in range(3)]
        out[spec] = (statistics.median(r["efficiency"] for r in runs),
                     statistics.median(r["steady_efficiency"] for r in runs))
    p = out["pss"]
    print(tasks, {k: f"{v[0]:.3f} ({v[1]:.3f}) = {v[0]/p[0]:.2f}x ({v[1]/p[1]:.2f}x)" for k, v in out.items()}, flush=True)
