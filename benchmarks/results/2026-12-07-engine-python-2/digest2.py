# Frozen at 75bcbe9. A digest of each simulated run (the whole result, timeline included); run with PYTHONPATH=<a worktree> for the before.
import hashlib, json
from types import SimpleNamespace
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import simulate_run
out = {}
profiles = lambda N: {"slow": f"slow={max(1, N//4)}:4", "transient": "straggle=0.1x5", "mixed": f"slow={max(1,N//4)}:3;straggle=0.1x5", "base": "base_ms=100", "change": f"change={max(1,N//4)}@50:4"}
for spec in ["auto", "hps", "epsp", "epspslack", "backup"]:
    for N in (4, 16, 64):
        for name, prof in profiles(N).items():
            for seed in (0, 1):
                cfg = SimpleNamespace(workers=N, ps=2, profile=prof, batch_size=32, tasks=N * 40,
                                      steps_per_epoch=N * 10, steps_per_execution=1, base_lr=0.02, momentum=0.9,
                                      target_accuracy=0.8, eval_interval_s=0.5, seed=seed, warmup_updates=0, dataset="digits")
                r = simulate_run(spec, cfg, costs_mod.load())
                out[f"{spec}-{N}-{name}-{seed}"] = hashlib.sha1(json.dumps(r, sort_keys=True, default=str).encode()).hexdigest()[:10]
print(json.dumps(out))
