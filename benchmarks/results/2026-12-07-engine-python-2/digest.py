# Frozen at 75bcbe9. A digest of each simulated run (the whole result, timeline included); run with PYTHONPATH=<a worktree> for the before.
import sys, hashlib, json
from types import SimpleNamespace
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import simulate_run
out = {}
for spec in ["ssp", "dynsgd", "grouped", "groupedsized", "casp", "caspsized", "hps", "epsp", "auto", "bsp"]:
    for N in (4, 16, 64):
        cfg = SimpleNamespace(workers=N, ps=2, profile=f"slow={N//4}:4", batch_size=32, tasks=N * 30,
                              steps_per_epoch=N * 10, steps_per_execution=1, base_lr=0.02, momentum=0.9,
                              target_accuracy=0.8, eval_interval_s=0.5, seed=1, warmup_updates=0, dataset="digits")
        r = simulate_run(spec, cfg, costs_mod.load(costs_mod.CALIBRATION_PATH) if hasattr(costs_mod, "CALIBRATION_PATH") else costs_mod.load())
        r.pop("timeline", None)
        out[f"{spec}-{N}"] = hashlib.sha1(json.dumps(r, sort_keys=True, default=str).encode()).hexdigest()[:10]
print(json.dumps(out))
