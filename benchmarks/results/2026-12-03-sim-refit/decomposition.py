import dataclasses, statistics
from tf_hetero.sim import costs as C
from tf_hetero.sim.run import simulate_run
from tf_hetero.tools.benchconfig import BenchConfig
unc = C.load("tf_hetero/sim/uncontended.json")
mnist = dict(strategies=("pss","hps"), profile="slow=3:4", dataset="mnist1d", model="cnn1d", tasks=1600, steps_per_epoch=200, target_accuracy=0.8)
def eff(spec, costs):
    return statistics.median(simulate_run(spec, BenchConfig(**{**mnist, "seed": s}), costs)["efficiency"] for s in range(3))
variants = {"uncontended": unc,
            "dispatch_s=0": dataclasses.replace(unc, dispatch_s=0.0),
            "apply_s=0": dataclasses.replace(unc, apply_s=0.0),
            "jitter=0": dataclasses.replace(unc, jitter_quantiles_s=(0.0, 0.0)),
            "first_task/apply=0": dataclasses.replace(unc, first_task_s=0.0, first_apply_s=0.0),
            "all four=0": dataclasses.replace(unc, dispatch_s=0.0, apply_s=0.0, jitter_quantiles_s=(0.0, 0.0), first_task_s=0.0, first_apply_s=0.0)}
print("| uncontended, then | pss efficiency | hps efficiency | hps / pss |\n|---|---:|---:|---:|")
for name, c in variants.items():
    p, h = eff("pss", c), eff("hps", c)
    print(f"| {name} | {p:.3f} | {h:.3f} | {h/p:.2f} |")
print()
for spec in ("hpsoverlap", "epsp"):
    for name in ("uncontended", "apply_s=0"):
        print(f"| {name} | {spec} | {eff(spec, variants[name]):.3f} |")
