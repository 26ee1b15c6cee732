# Frozen at the commit that adds tf_hetero/sim/nets.py. The digits learner, before/after: the same digest.
import hashlib, json
from types import SimpleNamespace
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import simulate_run
out = {}
for spec in ["pss", "hps", "bsp", "epsp", "auto", "casp"]:
    for prof in ("slow=1:4", "straggle=0.1x5"):
        cfg = SimpleNamespace(workers=4, ps=2, profile=prof, batch_size=32, tasks=200, steps_per_epoch=50,
                              steps_per_execution=1, base_lr=0.02, momentum=0.9, target_accuracy=0.8,
                              eval_interval_s=0.5, seed=2, warmup_updates=0, dataset="digits")
        r = simulate_run(spec, cfg, costs_mod.load(), learn=True)
        out[f"{spec}-{prof}"] = hashlib.sha1(json.dumps(r, sort_keys=True, default=str).encode()).hexdigest()[:10] + f" acc={r['final_accuracy']:.3f}"
print(json.dumps(out, indent=0))
