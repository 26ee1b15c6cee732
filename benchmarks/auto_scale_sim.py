"""AutoStrategy in the simulator at larger clusters: stock PSS, H-PS (at the linear rule, warmed
up) and auto (at the one-batch rate) on N workers of which every fourth is 4x slower, the
digits MLP (the simulator's statistical model), 100 micro-batches per worker; the decisions
auto made at each size. No TensorFlow: the same engine and policies on virtual time.

    .venv/bin/python benchmarks/auto_scale_sim.py 16,64,256 OUT.md
"""

from __future__ import annotations

import sys

from tf_hetero.sim import costs as costs_mod
from tf_hetero.sim.run import Simulation
from tf_hetero.tools.benchconfig import BenchConfig


def main(sizes: list[int], out: str | None) -> str:
    costs = costs_mod.load()
    lines = ["| workers | row | time to 0.9 s | final accuracy | samples/s | efficiency |",
             "|---:|---|---:|---:|---:|---:|"]
    decisions = []
    for n in sizes:
        slow = ",".join(f"{w}:4" for w in range(n) if w % 4 == 3)
        for spec in ("pss", "hps", "auto"):
            cfg = BenchConfig(strategies=(spec,), workers=n, profile=f"slow={slow}",
                              tasks=n * 100, steps_per_epoch=n * 25)
            sim = Simulation(spec, cfg, costs, learn=True)
            r = sim.result(sim.fit())
            ttt = r["time_to_target_s"]
            lines.append(f"| {n} | {spec} | {'not reached' if ttt is None else f'{ttt:.1f}'} | "
                         f"{r['final_accuracy']:.3f} | {r['samples_per_sec']:.0f} | "
                         f"{r['efficiency']:.3f} |")
            for d in r.get("auto_decisions", []):
                decisions.append(f"- {n} workers, {d['t_s']:.1f} s: "
                                 f"{'sized' if d['mode'] == 'rounds' else 'async'}, global batch "
                                 f"{d['global_batch']}, step x{d['gain']:.2f}: {d['why']}")
            print(lines[-1], flush=True)
    text = "\n".join(lines + ["", "Decisions of auto:", ""] + decisions) + "\n"
    if out:
        with open(out, "w") as f:
            f.write(text)
    return text


if __name__ == "__main__":
    print(main([int(x) for x in sys.argv[1].split(",")], sys.argv[2] if len(sys.argv) > 2 else None))
