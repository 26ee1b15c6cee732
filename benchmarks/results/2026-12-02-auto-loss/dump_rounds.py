"""Frozen at 484aeb6: benchmarks/auto_variants.py with each auto run's per-round series kept.

Run from the repository root:

    flock /tmp/heavy.lock .venv/bin/python benchmarks/results/2026-12-02-auto-loss/dump_rounds.py SCENARIO 3 OUT ROWS...
"""
import sys, time
sys.path.insert(0, "benchmarks")
import auto_variants
from tf_hetero.tools import benchrow
from tf_hetero.policies import diverge

LOSSES = []
_orig_check = diverge.LossGuard.check
def check(self, step, loss):
    LOSSES.append((time.perf_counter(), step, loss))
    return _orig_check(self, step, loss)
diverge.LossGuard.check = check

_orig = benchrow._engine_figures
def figures(row, records):
    n, f = _orig(row, records)
    s = row.strategy
    if getattr(s, "controller", None) is not None:
        t0 = s.monitor.t0
        ser = []
        for r in s.monitor.rounds:
            g = r.info.get("gradient")
            ser.append([r.t_applied - t0 if r.t_applied else None, r.info.get("grad_norm"),
                        getattr(g, "mean_sq", None), getattr(g, "lane_sq", None),
                        len(r.info.get("sizes") or []), r.info.get("scale"),
                        getattr(g, "loss", None)])
        f["series"] = ser
        f["losses"] = [(t - t0, st, l) for t, st, l in LOSSES]
    LOSSES.clear()
    return n, f
benchrow._engine_figures = figures

if __name__ == "__main__":
    auto_variants.main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:])
