"""How the projection with one PS per 16 workers depends on the chief's cost per token task
(token_task_s: 0.14 ms as shipped, 0.03 ms the engine's own Python per task at 1000 workers in
the simulator): H-PS and H-PS overlapped, uncontended costs, 100 rounds, throughput only.
    python benchmarks/results/2026-12-08-carrier-ps-cost/sensitivity.py > sensitivity.txt
Frozen at the commit of this folder's README."""
import dataclasses, json
from tf_hetero.sim import costs as costs_module
from tf_hetero.sim.run import simulate_run
from tf_hetero.sim.sweep import quarter_slow
from tf_hetero.tools.benchconfig import BenchConfig
base = costs_module.load("tf_hetero/sim/uncontended.json")
for task_s in (0.00014, 0.00003):
    costs = dataclasses.replace(base, token_task_s=task_s)
    for n in (64, 256, 1000):
        ps = max(2, n // 16)
        tasks = 100 * n
        cfg = BenchConfig(strategies=("hps",), workers=n, ps=ps, profile=quarter_slow(n, 4), tasks=tasks,
                          steps_per_epoch=tasks // 4, model="cnn1d", dataset="mnist1d", batch_size=32, warmup_updates=0)
        for spec in ("hps", "hpsoverlap"):
            r = simulate_run(spec, cfg, costs, learn=False, stop_on_divergence=False, launch="tokens")
            print(json.dumps({"token_task_s": task_s, "workers": n, "ps": ps, "row": spec,
                              "efficiency": round(r["efficiency"], 3), "steady_efficiency": round(r["steady_efficiency"], 3),
                              "mean_round_ms": round(r["mean_round_ms"], 1)}), flush=True)
