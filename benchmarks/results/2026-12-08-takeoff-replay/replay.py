"""Replays every stored AutoStrategy run's per-round series (norm, step, loss) through the step's
ceiling, as shipped and with the joint norm-and-loss rule gated off during the takeoff, and
prints where each first lowers the ceiling. Frozen at the commit of this folder (it imports
`tf_hetero.policies.stability`'s `StepCeiling` and its private `_SMOOTH`).

    .venv/bin/python benchmarks/results/2026-12-08-takeoff-replay/replay.py GATE [plain]

Run from the repository root. GATE: the joint rule is off while the loss (the median of the
last 3 rounds) is above GATE x the median loss of the first 4 rounds. By default a loss above
that starting loss still counts; with `plain` it does not.

Only the first back-off is a counterfactual: after it the stored series is the lowered step's.
"""

import glob
import gzip
import json
import math
import statistics
import sys

sys.path.insert(0, ".")
from tf_hetero.policies.stability import _SMOOTH, StepCeiling  # noqa: E402

GATE = float(sys.argv[1]) if len(sys.argv) > 1 else 0.75
PLAIN = len(sys.argv) > 2 and sys.argv[2] == "plain"


class Gated(StepCeiling):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.start, self.first = None, []

    def _climb(self, loss, ratio):
        if math.isfinite(loss) and self.start is None:
            self.first.append(loss)
            if len(self.first) >= 4:
                self.start = statistics.median(self.first)
        if (ratio is not None and self.start is not None and math.isfinite(loss)
                and len(self.losses) >= _SMOOTH
                and statistics.median(list(self.losses)[-_SMOOTH + 1:] + [loss])
                > GATE * self.start
                and (PLAIN or loss <= self.start)):
            ratio = min(ratio, self.joint * 0.999)  # the joint rule off during the takeoff
        return super()._climb(loss, ratio)


def first_fire(cls, series):
    ceiling = cls(6.0)
    for i, (t, norm, _, _, _, step, loss) in enumerate(series):
        if norm is None or not step:
            continue
        why = ceiling.observe(float(norm) / float(step), float(step),
                              math.nan if loss is None else float(loss))
        if why:
            return i, t, loss, why[:60]
    return None


for path in sorted(glob.glob("benchmarks/results/2026-12-0*/**/bench.json.gz", recursive=True)):
    bench = json.load(gzip.open(path))
    workers = bench["config"].get("workers")
    for run in bench["runs"]:
        series = run.get("series")
        if not series or len(series[0]) != 7:  # the series before the loss was reported
            continue
        a, b = first_fire(StepCeiling, series), first_fire(Gated, series)
        logged = [q for q in run.get("auto_decisions", []) if "edge of stability" in q.get("why", "")]
        rec = f"{logged[0]['t_s']:.1f}" if logged else "-"
        same = (a and b and a[0] == b[0]) or (a is None and b is None)
        shipped = ("%d@%.1fs L%.2f %s" % a) if a else "-"
        gated = "same" if same else (("%d@%.1fs" % b[:2]) if b else "-")
        print(f"{path.split('results/')[1][:44]:44s} w{workers:<2} {run['strategy'][:14]:14s} "
              f"ttt {run['time_to_target_s'] or 0:5.1f} acc {run['final_accuracy']:.2f} "
              f"logged {rec:>5} shipped {shipped:70s} gated {gated}")
