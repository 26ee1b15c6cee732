"""(Frozen at the commit that adds submit_auto_after.txt, README.) The engine's own Python per submitted task as the cluster grows: a simulated H-PS fit
(tokens, uncontended costs), the time spent inside RoundEngine.submit (the fit thread's
call per step) per task, and the whole simulation's wall time per task."""
import sys, time
from types import SimpleNamespace
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import Simulation
from tf_hetero.engine import RoundEngine
spent = [0.0]
orig = RoundEngine.submit
def timed(self, *a, **k):
    t = time.perf_counter()
    try:
        return orig(self, *a, **k)
    finally:
        spent[0] += time.perf_counter() - t
RoundEngine.submit = timed
for spec in sys.argv[1].split(","):
    for N, R in ((4, 400), (64, 100), (256, 40), (1000, 20)):
        cfg = SimpleNamespace(workers=N, ps=2, profile=f"classes=fast:{N - max(1, N//4)}@1,slow:{max(1, N//4)}@4",
                              batch_size=32, tasks=N * R, steps_per_epoch=N * R // 4, steps_per_execution=1,
                              base_lr=0.02, momentum=0.9, target_accuracy=0.9, eval_interval_s=0.5, seed=0,
                              warmup_updates=0, dataset="digits")
        spent[0] = 0.0
        sim = Simulation(spec, cfg, costs_mod.load(costs_mod.UNCONTENDED_PATH),
                         launch="tokens" if spec not in ("pss", "auto") else "closures")
        t = time.perf_counter(); sim.fit(); wall = time.perf_counter() - t
        print(f"{spec:10s} N={N:5d}: submit {spent[0] / (N * R) * 1e6:7.1f} us/task, "
              f"whole {wall / (N * R) * 1e6:7.1f} us/task", flush=True)
