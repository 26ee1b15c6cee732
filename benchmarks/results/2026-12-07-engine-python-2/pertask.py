# Frozen at 75bcbe9 (before: a worktree of 49f2b27 on PYTHONPATH). Usage: pertask.py N ROUNDS [STRATEGIES]; env PROFILE, LAUNCH.
import time, sys
from types import SimpleNamespace
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import Simulation, row_launch
from tf_hetero.strategies import registry
import os; LAUNCH = os.environ.get("LAUNCH", "tokens")
N = int(sys.argv[1]); R = int(sys.argv[2]); names = sys.argv[3].split(",") if len(sys.argv) > 3 else None
names = names or sorted(registry.names())
for spec in names:
    cfg = SimpleNamespace(workers=N, ps=2, profile=os.environ.get("PROFILE") or f"classes=fast:{N - N//4}@1,slow:{N//4}@4", batch_size=32,
                          tasks=N * R, steps_per_epoch=N * R // 4, steps_per_execution=1, base_lr=0.02,
                          momentum=0.9, target_accuracy=0.99, eval_interval_s=0.5, seed=0, warmup_updates=0,
                          dataset="digits")
    try:
        sim = Simulation(spec, cfg, costs_mod.load(costs_mod.UNCONTENDED_PATH), launch=row_launch(spec, LAUNCH))
    except Exception as e:
        print(spec, "refused:", str(e)[:80]); continue
    t = time.perf_counter(); sim.fit(); wall = time.perf_counter() - t
    print(f"{spec:14s} N={N} {wall:7.2f} s {wall / (N * R) * 1e6:8.1f} us/task rounds {len(sim.engine.rounds)}", flush=True)
