"""(Frozen at the commit that adds it.) A/B in one process: Round.num_done kept by the engine vs counted at every
question (the code before), simulated fits at 1000 workers (closures for auto, tokens otherwise).
    .venv/bin/python benchmarks/results/2026-12-07-engine-python/numdone_ab.py auto,backup,epspslack"""
import time, sys
from types import SimpleNamespace
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import Simulation
from tf_hetero.engine.state import Round, TaskState
kept = Round.num_done
counted = property(lambda rnd: sum(t.state == TaskState.DONE or (t.twin is not None and t.twin.state == TaskState.DONE) for t in rnd.tasks))
N, R = 1000, 20
for spec in sys.argv[1].split(","):
    for rep in range(2):
        for name, prop in (("kept", kept), ("counted", counted)):
            Round.num_done = prop
            cfg = SimpleNamespace(workers=N, ps=2, profile=f"classes=fast:{N - N//4}@1,slow:{N//4}@4", batch_size=32,
                                  tasks=N * R, steps_per_epoch=N * R // 4, steps_per_execution=1, base_lr=0.02,
                                  momentum=0.9, target_accuracy=0.9, eval_interval_s=0.5, seed=0, warmup_updates=0,
                                  dataset="digits")
            sim = Simulation(spec, cfg, costs_mod.load(costs_mod.UNCONTENDED_PATH),
                             launch="closures" if spec in ("auto", "pss") else "tokens")
            t = time.perf_counter(); sim.fit(); wall = time.perf_counter() - t
            print(f"{spec:10s} {name:8s} {wall / (N * R) * 1e6:7.1f} us per task", flush=True)
Round.num_done = kept
