"""`auto_variants.py` with each AutoStrategy run's per-round series kept: the numbers the
step's edge-of-stability rules read (docs/AUTO.md, section 2), for replaying them offline.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/auto_series.py SCENARIO 3 OUT ROWS...

Each auto run in ``OUT/bench.json`` gets ``series``: per round of the monitor, ``[applied s
from the fit's start, reported norm (of the update, after the step), mean_sq, lane_sq,
lanes, step, loss]`` (``loss``: the round's batch loss; ``None`` before it was reported,
`484aeb6`), and ``losses``: ``[s, step, loss]`` for each step's loss the runtime's loss
check read (``model.fit``'s logged loss).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import auto_variants  # noqa: E402
from tf_hetero.policies import diverge  # noqa: E402
from tf_hetero.tools import benchrow  # noqa: E402

_STEP_LOSSES: list = []
_check = diverge.LossGuard.check
_figures = benchrow._engine_figures


def _keeping_check(self, step, loss, *args, **kwargs):
    _STEP_LOSSES.append((time.perf_counter(), step, loss))
    return _check(self, step, loss, *args, **kwargs)


def _with_series(row, records):
    n, figures = _figures(row, records)
    strategy = row.strategy
    if getattr(strategy, "controller", None) is not None:
        t0 = strategy.monitor.t0
        series = []
        for r in strategy.monitor.rounds:
            g = r.info.get("gradient")
            series.append([r.t_applied - t0 if r.t_applied else None, r.info.get("grad_norm"),
                           getattr(g, "mean_sq", None), getattr(g, "lane_sq", None),
                           len(r.info.get("sizes") or []), r.info.get("scale"),
                           getattr(g, "loss", None)])
        figures["series"] = series
        figures["losses"] = [(t - t0, s, x) for t, s, x in _STEP_LOSSES]
    _STEP_LOSSES.clear()
    return n, figures


if __name__ == "__main__":
    diverge.LossGuard.check = _keeping_check
    benchrow._engine_figures = _with_series
    auto_variants.main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:])
