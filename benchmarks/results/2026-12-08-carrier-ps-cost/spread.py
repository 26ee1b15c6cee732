"""The token launch with the carriers' queues spread over the PS tasks (lane w's on PS w % P,
as the carriers place them now; P = max(2, N // 16)) against every queue on PS 0 (as they
were first built: this script patches the simulator for that row), and closures; H-PS,
uncontended costs, a quarter of the workers 4x slower, 100 BSP-sized rounds, throughput only.
    python benchmarks/results/2026-12-08-carrier-ps-cost/spread.py > spread.txt
Frozen at the commit of this folder's README."""
import json
from tf_hetero.sim import costs as costs_module
from tf_hetero.sim.dispatcher import SimDispatcher
from tf_hetero.sim.run import simulate_run
from tf_hetero.sim.sweep import quarter_slow
from tf_hetero.tools.benchconfig import BenchConfig

ON_PS0 = {"on": False}
_launch = SimDispatcher._launch


def launch(self, worker):  # SimDispatcher._launch with every token served by PS 0
    if not ON_PS0["on"] or not self._token_ps_s:
        return _launch(self, worker)
    queue = self._queues[worker]
    if not queue:
        self._active[worker] = False
        return
    closure = queue.popleft()
    start = max(self.loop.now, self._chief_free)
    self._chief_free = start + self._task_launch_s
    self._ps_free[0] = max(self._ps_free[0], self._chief_free) + self._token_ps_s
    self.loop.at(self._ps_free[0], self._begin, worker, closure)


SimDispatcher._launch = launch
costs = costs_module.load("tf_hetero/sim/uncontended.json")
for n in (4, 64, 256, 1000):
    ps = max(2, n // 16)
    tasks = 100 * n
    cfg = BenchConfig(strategies=("hps",), workers=n, ps=ps, profile=quarter_slow(n, 4),
                      tasks=tasks, steps_per_epoch=tasks // 4, model="cnn1d", dataset="mnist1d",
                      batch_size=32, warmup_updates=0)
    for name, on_ps0, launch_ in (("closures", False, "closures"),
                                  ("tokens, queues on PS 0", True, "tokens"),
                                  ("tokens, queues spread", False, "tokens")):
        ON_PS0["on"] = on_ps0
        r = simulate_run("hps", cfg, costs, learn=False, stop_on_divergence=False, launch=launch_)
        print(json.dumps({"workers": n, "ps": ps, "launch": name,
                          "efficiency": round(r["efficiency"], 3),
                          "steady_efficiency": round(r["steady_efficiency"], 3),
                          "mean_round_ms": round(r["mean_round_ms"], 1)}), flush=True)
