# Frozen at the commit of this folder's README. A digest of each simulated run of the strategies that pump
# asynchronous steps (and SSP, DynSGD): python digest.py OUT.json; PYTHONPATH=<a worktree> for the before.
import hashlib, json, sys
from types import SimpleNamespace
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import simulate_run
out = {}
for spec in ["asp", "pss", "auto", "ssp", "dynsgd"]:
    for N in (4, 16, 64):
        for prof in (f"slow={max(1, N//4)}:4", "straggle=0.1x5", f"change={max(1,N//4)}@50:4"):
            for seed in (0, 1):
                cfg = SimpleNamespace(workers=N, ps=2, profile=prof, batch_size=32, tasks=N * 40,
                                      steps_per_epoch=N * 10, steps_per_execution=1, base_lr=0.02,
                                      momentum=0.9, target_accuracy=0.8, eval_interval_s=0.5,
                                      seed=seed, warmup_updates=0, dataset="digits")
                r = simulate_run(spec, cfg, costs_mod.load())
                out[f"{spec}-{N}-{prof}-{seed}"] = hashlib.sha1(json.dumps(r, sort_keys=True, default=str).encode()).hexdigest()[:10]
json.dump(out, open(sys.argv[1], "w"), indent=0)
print(len(out))
