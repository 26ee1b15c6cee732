"""Simulated time to target with the MNIST-1D statistical model (cnn1d) against the stored
measured runs (benchmarks/measured/*.json): per row, measured time to 0.8 and final accuracy,
the simulated median over 3 seeds. Frozen at the commit that adds tf_hetero/sim/nets.py."""
import json, statistics, sys
from types import SimpleNamespace
from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import simulate_run
from tf_hetero.sim.validate import measured_files

out = {}
for path in measured_files():
    bench = json.load(open(path))
    name = path.rsplit("/", 1)[-1][:-5]
    rows = []
    for r in bench["results"]:
        sims = [simulate_run(r["strategy"], SimpleNamespace(**{**bench["config"], "seed": s}),
                             costs_mod.load(), learn=True) for s in range(3)]
        ttt = [s["time_to_target_s"] for s in sims]
        reached = [t for t in ttt if t is not None]
        rows.append({"strategy": r["strategy"], "measured_ttt": r["time_to_target_s"],
                     "measured_final": r["final_accuracy"],
                     "sim_ttt": ttt, "sim_ttt_median": statistics.median(reached) if len(reached) >= 2 else None,
                     "sim_final": statistics.median(s["final_accuracy"] for s in sims)})
        print(name, json.dumps(rows[-1]), flush=True)
    out[name] = rows
json.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else "ttt.json", "w"), indent=1)
