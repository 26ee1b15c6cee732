"""(Frozen at the commit that adds submit_auto_after.txt, README.) The sized assignment policy's plan (on the round's critical path: between an apply and the
next round's dispatch) per round, as the fit goes on: a simulated H-PS fit, 4 and 64 workers."""
import sys, time
from types import SimpleNamespace
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import Simulation
from tf_hetero.policies.assign import BalancedBatches
calls = []
orig = BalancedBatches.plan
def timed(self, *a, **k):
    t = time.perf_counter()
    try:
        return orig(self, *a, **k)
    finally:
        calls.append(time.perf_counter() - t)
BalancedBatches.plan = timed
for N, R in ((4, 4000), (64, 400)):
    cfg = SimpleNamespace(workers=N, ps=2, profile=f"classes=fast:{N - max(1, N//4)}@1,slow:{max(1, N//4)}@4",
                          batch_size=32, tasks=N * R, steps_per_epoch=N * R // 4, steps_per_execution=1,
                          base_lr=0.02, momentum=0.9, target_accuracy=0.9, eval_interval_s=0.5, seed=0,
                          warmup_updates=0, dataset="digits")
    calls.clear()
    Simulation("hps", cfg, costs_mod.load(costs_mod.UNCONTENDED_PATH)).fit()
    k = len(calls) // 10
    print(f"N={N} rounds={R}: plan ms per round, first tenth {sum(calls[:k]) / k * 1e3:.3f}, "
          f"last tenth {sum(calls[-k:]) / k * 1e3:.3f} ({len(calls)} plans)", flush=True)
