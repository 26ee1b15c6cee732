"""What stops H-PS at stock PSS's efficiency on a host with a core per task: each cost of the
uncontended model (tf_hetero/sim/uncontended.json) set to 0 in turn, one_slow on the MNIST-1D
configuration, median of 3 seeds. No TensorFlow.

    .venv/bin/python benchmarks/results/2026-12-06-dispatch-designs/unc_zero.py

Frozen at the commit of this folder's README."""
import dataclasses, statistics, sys
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import simulate_run
from tf_hetero.tools.benchconfig import BenchConfig
unc = costs_mod.load(costs_mod.UNCONTENDED_PATH)
mnist = dict(strategies=("pss", "hps", "hpsoverlap"), profile="slow=3:4", dataset="mnist1d", model="cnn1d",
             tasks=1600, steps_per_epoch=200, target_accuracy=0.8)
def eff(spec, c):
    runs = [simulate_run(spec, BenchConfig(**{**mnist, "seed": s}), c) for s in range(3)]
    return statistics.median(r["efficiency"] for r in runs)
variants = {
    "as is": unc,
    "apply 0": dataclasses.replace(unc, apply_s=0.0),
    "jitter 0": dataclasses.replace(unc, jitter_quantiles_s=(0.0, 0.0)),
    "dispatch 0": dataclasses.replace(unc, dispatch_s=0.0),
    "first task/apply 0": dataclasses.replace(unc, first_task_s=0.0, first_apply_s=0.0),
    "all four 0": dataclasses.replace(unc, apply_s=0.0, jitter_quantiles_s=(0.0, 0.0), dispatch_s=0.0, first_task_s=0.0, first_apply_s=0.0),
}
for name, c in variants.items():
    p = eff("pss", c)
    print(f"{name}: hps/pss {eff('hps', c)/p:.2f}  hpsoverlap/pss {eff('hpsoverlap', c)/p:.2f}")
