"""The chief's dispatch as the cluster grows (issue 49, item 4): stock PSS, BSP and H-PS on N
equal workers whose emulated device time is tiny (``base_ms``), so that what limits them is the
chief launching closures and the rounds' own cost, not the workers' compute. One
`tf-hetero bench` run per N (multi-process cluster, the bench's clock, meters and warm-up),
each in a process of its own (no N inherits the previous one's chief state), with the
accuracy evaluations off (the chief's CPU is all dispatch); the table per row and N:
closures per second, round time and its breakdown, and the chief's CPU per closure.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/dispatch_scale.py 4,8,16,32 OUT_DIR

On a 2-core machine every process of the cluster shares the two cores: the chief's CPU per
closure is the figure that does not depend on that (the closures/s at large N does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import tf_hetero  # noqa: F401  (quiet TensorFlow logs first)

#: Rounds (BSP, H-PS) per run; stock PSS runs the same closures, ROUNDS x N.
ROUNDS = 30
BASE_MS = 2


#: The accuracy sampler's interval: longer than any run, so the chief never evaluates.
NO_EVAL_S = 3600.0


def main(sizes: list[int], out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    table = []
    for n in sizes:
        rows_path = os.path.join(out_dir, f"n{n}", "rows.json")
        done = subprocess.run([sys.executable, __file__, "--one", str(n), out_dir],
                              check=False)
        if done.returncode != 0 or not os.path.exists(rows_path):
            print(f"[dispatch_scale] {n} workers: no result (exit {done.returncode})",
                  flush=True)
            continue
        with open(rows_path) as f:
            table.extend(json.load(f))
        with open(os.path.join(out_dir, "dispatch_scale.json"), "w") as f:
            json.dump(table, f, indent=1)
    print(format_table(table))


def one(n: int, out_dir: str) -> None:
    """The bench at ``n`` workers, its rows written to ``OUT/n{n}/rows.json``."""
    from tf_hetero.tools.bench import run_bench
    from tf_hetero.tools.benchconfig import BenchConfig

    cfg = BenchConfig(strategies=("bsp", "hps"), workers=n, ps=2,
                      profile=f"base_ms={BASE_MS}", model="mlp", dataset="digits",
                      tasks=ROUNDS * n, steps_per_epoch=ROUNDS * n, target_accuracy=0.99,
                      eval_interval_s=NO_EVAL_S, repeats=2,
                      out_dir=os.path.join(out_dir, f"n{n}"),
                      json_path=os.path.join(out_dir, f"n{n}", "bench.json"))
    try:
        results = run_bench(cfg)
    except Exception as e:  # pylint: disable=broad-except
        # e.g. 34 processes importing TensorFlow on 2 cores miss the cluster's start bound
        print(f"[dispatch_scale] {n} workers: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    rows = []
    for r in results:
        closures = r["tasks"] / r["span_s"] if r.get("span_s") else None
        cpu = r.get("cpu_s_per_1000_samples") or {}
        per_closure = {k: v * cfg.batch_size for k, v in cpu.items()}  # ms per closure
        rows.append(dict(workers=n, strategy=r["strategy"], tasks=r["tasks"],
                         samples_per_sec=r["samples_per_sec"], closures_per_s=closures,
                         round_ms=r.get("mean_round_ms"), breakdown=r.get("round_breakdown_ms"),
                         cpu_ms_per_closure=per_closure, machine_busy=r.get("machine_busy")))
    with open(os.path.join(out_dir, f"n{n}", "rows.json"), "w") as f:
        json.dump(rows, f, indent=1)


def format_table(table: list[dict]) -> str:
    lines = ["| workers | row | closures/s | samples/s | round ms (dispatch/task/barrier/apply/gap) "
             "| chief / worker / PS CPU ms per closure | machine busy |",
             "|---:|---|---:|---:|---|---|---:|"]
    for t in table:
        b = t["breakdown"] or {}
        parts = "/".join(f"{b[k]:.0f}" for k in ("dispatch", "task", "barrier", "apply", "gap")
                         if k in b)
        cpu = t["cpu_ms_per_closure"]
        lines.append(f"| {t['workers']} | {t['strategy']} | "
                     f"{t['closures_per_s'] or float('nan'):.0f} | {t['samples_per_sec']:.0f} | "
                     f"{(t['round_ms'] or float('nan')):.0f} ({parts}) | "
                     f"{cpu.get('chief', float('nan')):.2f} / {cpu.get('worker', float('nan')):.2f}"
                     f" / {cpu.get('ps', float('nan')):.2f} | {t['machine_busy'] or 0:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        one(int(sys.argv[2]), sys.argv[3])
    else:
        main([int(x) for x in sys.argv[1].split(",")], sys.argv[2])
