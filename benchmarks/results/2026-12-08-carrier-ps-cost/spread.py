"""What-if (simulator): the carriers' token queues spread over the PS tasks (lane w's queues
on PS w % P, P = max(2, N // 16)), against every queue on PS 0 (as built), H-PS, uncontended
costs, a quarter of the workers 4x slower, 100 BSP-sized rounds, throughput only.
    python benchmarks/results/2026-12-08-carrier-ps-cost/spread.py > spread.txt
Frozen at the commit of this folder's README."""
import dataclasses, json, sys
from tf_hetero.sim import costs as costs_module
from tf_hetero.sim.dispatcher import SimDispatcher
from tf_hetero.sim.run import simulate_run
from tf_hetero.sim.sweep import quarter_slow
from tf_hetero.tools.benchconfig import BenchConfig

SPREAD = {"on": False}
_launch = SimDispatcher._launch


def launch(self, worker):  # as SimDispatcher._launch, the token served by PS worker % P
    if not SPREAD["on"] or not self._token_ps_s:
        return _launch(self, worker)
    queue = self._queues[worker]
    if not queue:
        self._active[worker] = False
        return
    closure = queue.popleft()
    start = max(self.loop.now, self._chief_free)
    self._chief_free = start + self._task_launch_s
    p = worker % self.num_ps
    self._ps_free[p] = max(self._ps_free[p], self._chief_free) + self._token_ps_s
    self.loop.at(self._ps_free[p], self._begin, worker, closure)


SimDispatcher._launch = launch
costs = costs_module.load("tf_hetero/sim/uncontended.json")
out = []
for n in (4, 64, 256, 1000):
    ps = max(2, n // 16)
    tasks = 100 * n
    cfg = BenchConfig(strategies=("hps",), workers=n, ps=ps, profile=quarter_slow(n, 4),
                      tasks=tasks, steps_per_epoch=tasks // 4, model="cnn1d", dataset="mnist1d",
                      batch_size=32, warmup_updates=0)
    for name, spread, launch_ in (("closures", False, "closures"), ("tokens, queues on PS 0", False, "tokens"),
                                  ("tokens, queues spread", True, "tokens")):
        SPREAD["on"] = spread
        r = simulate_run("hps", cfg, costs, learn=False, stop_on_divergence=False, launch=launch_)
        row = {"workers": n, "ps": ps, "launch": name, "efficiency": round(r["efficiency"], 3),
               "steady_efficiency": round(r["steady_efficiency"], 3),
               "mean_round_ms": round(r["mean_round_ms"], 1)}
        out.append(row)
        print(json.dumps(row), flush=True)
