"""The uncontended projection (issue 49, item 3): what the rows of ``one_slow`` would do on a
host with a core per task, from the simulator with two cost models side by side:

- *fitted*: the shipped calibration (``tf_hetero/sim/calibration.json``, fitted from
  ``benchmarks/measured/one_slow.json`` on this 2-core machine);
- *uncontended*: the same, with every step closure's own cost and the steps' jitter set to
  what they are in a run with nothing else on the cores, and a round's apply to its own chief
  <-> PS hops (:func:`tf_hetero.sim.calibrate.uncontended`; the values and their sources:
  :data:`QUIET`, :data:`APPLY_S`, docs/SIMULATOR.md). Written to
  ``tf_hetero/sim/uncontended.json``, so ``tf-hetero sim --costs`` takes it too.

Efficiency on the measured problem (MNIST-1D CNN, 1,600 micro-batches: throughput only, the
simulator has no statistical model of it), time to 0.9 on the digits MLP (its statistical
model; 400 micro-batches, as the digits bench). Median of 3 seeds. No TensorFlow.

    .venv/bin/python benchmarks/uncontended_projection.py [OUT.md]
"""

from __future__ import annotations

import json
import os
import statistics
import sys

from tf_hetero.sim import calibrate, costs as costs_mod
from tf_hetero.sim.run import simulate_run
from tf_hetero.tools.benchconfig import BenchConfig

#: A run with nothing competing for the cores: one worker, one PS, stock PSS, the MNIST-1D
#: CNN, 100 ms of device time a step (benchmarks/measured/quiet/one_worker.json; its
#: command in benchmarks/measured/README.md). A closure's cost beyond its device time
#: and the steps' jitter are read from it (``calibrate.quiet_step``): 7.4 ms (the round
#: profile of docs/MEASUREMENT.md reads launch 3.1 + return 2.3 + the device's overrun ~1.5 =
#: ~7 ms for the same closure; the calibration run's pss steps, launched apart, 10.0 ms).
QUIET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "measured", "quiet",
                     "one_worker.json")
#: A round's apply on the chief, hand-off 0.7 + call 9.4 + book 0.1 ms (round profile, H-PS
#: on one_slow, a loaded fit; the calibration's breakdown reads 28 ms, close -> applied, with
#: the next round's launches beside it).
APPLY_S = 0.0102
ROWS = ("pss", "bsp", "hps", "epsp")
#: Figures of each simulated row kept in the JSON beside the table.
KEPT = ("samples_per_sec", "efficiency", "time_to_target_s", "mean_round_ms")


def _median_run(spec, cfg, costs, learn):
    runs = [simulate_run(spec, BenchConfig(**{**cfg, "seed": s}), costs, learn=learn)
            for s in range(3)]
    return sorted(runs, key=lambda r: r["samples_per_sec"])[1] if not learn else {
        "samples_per_sec": statistics.median(r["samples_per_sec"] for r in runs),
        "efficiency": statistics.median(r["efficiency"] for r in runs),
        "time_to_target_s": statistics.median(
            r["time_to_target_s"] if r["time_to_target_s"] is not None else float("inf")
            for r in runs)}


def main(out: str | None = None) -> str:
    fitted = costs_mod.load()
    with open(QUIET) as f:
        closure_s, jitter = calibrate.quiet_step(json.load(f))
    unc = calibrate.uncontended(
        fitted, closure_s, APPLY_S, jitter_quantiles_s=jitter,
        source=f"closure_s {closure_s * 1e3:.1f} ms and the step jitter: a quiet one-worker "
               "run (benchmarks/measured/quiet/one_worker.json); apply_s 10.2 ms: the round "
               "profile's apply (benchmarks/uncontended_projection.py)")
    unc.save(costs_mod.UNCONTENDED_PATH)
    mnist = dict(strategies=ROWS, profile="slow=3:4", dataset="mnist1d", model="cnn1d",
                 tasks=1600, steps_per_epoch=200, target_accuracy=0.8)
    digits = dict(strategies=ROWS, profile="slow=3:4", tasks=400, steps_per_epoch=100,
                  target_accuracy=0.9, warmup_updates=0)
    res = {}
    for name, costs in (("fitted", fitted), ("uncontended", unc)):
        for spec in ROWS:
            res[name, spec] = (_median_run(spec, mnist, costs, False),
                               _median_run(spec, digits, costs, True))
    lines = ["| cost model | row | MNIST-1D samples/s | efficiency | vs stock PSS | digits "
             "time to 0.9 s | BSP's time / this |", "|---|---|---:|---:|---:|---:|---:|"]
    for name in ("fitted", "uncontended"):
        pss_eff = res[name, "pss"][0]["efficiency"]
        bsp_t = res[name, "bsp"][1]["time_to_target_s"]
        for spec in ROWS:
            m, d = res[name, spec]
            t = d["time_to_target_s"]
            lines.append(f"| {name} | {spec} | {m['samples_per_sec']:.0f} | "
                         f"{m['efficiency']:.3f} | {m['efficiency'] / pss_eff:.2f} | "
                         f"{t:.1f} | {bsp_t / t:.2f} |")
    table = "\n".join(lines)
    if out:
        with open(out, "w") as f:
            f.write(table + "\n")
        with open(out.rsplit(".", 1)[0] + ".json", "w") as f:
            json.dump({f"{k[0]}/{k[1]}": [{key: r.get(key) for key in KEPT} for r in v]
                       for k, v in res.items()}, f, indent=1)
    return table


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
