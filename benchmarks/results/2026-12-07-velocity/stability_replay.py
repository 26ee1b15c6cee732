# Frozen at commit 781a3a4: run with git checkout 781a3a4, from this folder:
#   ../../../.venv/bin/python stability_replay.py two-of-three
"""Replays a StepCeiling variant (``VARIANTS``) on the per-round series of every measured
AutoStrategy run kept in ``benchmarks/results/*/bench.json.gz`` (``series``: ``[s, reported
norm, mean_sq, lane_sq, lanes, step, loss]``), beside the shipped rules: the rounds at which
each backs off. Exact up to the first back-off where the two differ (after it the measured
fit went on at the step it took)."""
import glob
import gzip
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
from tf_hetero.policies import stability  # noqa: E402


#: Each variant: ``(old, new)`` replacements in ``stability.py`` at 781a3a4 (also kept as the
#: git tags ``rejected/stability-*``, which a landing may not carry).
VARIANTS = {
    # the loss rules' "two rounds in a row" -> "two of the last three rounds"
    "two-of-three": [
        ("self.climbing = False  # the previous", "self.climbing = 0  # the previous"),
        ("        if not math.isfinite(loss):\n            self.climbing = False",
         "        if not math.isfinite(loss):\n"
         "            self.climbing = max(0, self.climbing - 1)"),
        ("        else:\n            self.climbing = False\n"
         "            return None\n        if not",
         "        else:\n            self.climbing = max(0, self.climbing - 1)\n"
         "            return None\n        if not"),
        ("        if not self.climbing:\n            self.climbing = True\n            return None",
         "        flagged, self.climbing = self.climbing, 2\n        if not flagged:\n"
         "            return None"),
        ("        self.losses.clear()\n        self.climbing = False",
         "        self.losses.clear()\n        self.climbing = 0"),
    ],
    # at once when the norm is joint**2 (4x) and the loss 25% + 3 noise above the median
    "joint-at-once": [
        ("        if not self.climbing:\n            self.climbing = True",
         "        at_once = (ratio is not None and ratio >= self.joint ** 2\n"
         "                   and loss > reference * (1 + self.rise) + 3 * noise)\n"
         "        if not self.climbing and not at_once:\n            self.climbing = True"),
    ],
}


def variant(name: str) -> type:
    """The ``StepCeiling`` of ``stability.py`` at 781a3a4 with ``VARIANTS[name]`` applied."""
    source = subprocess.run(["git", "show", "781a3a4:tf_hetero/policies/stability.py"],
                            cwd=HERE, check=True, capture_output=True, text=True).stdout
    for old, new in VARIANTS[name]:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    module = {"__name__": "variant"}
    exec(compile(source, name, "exec"), module)  # pylint: disable=exec-used
    return module["StepCeiling"]


def runs():
    for f in sorted(glob.glob(os.path.join(HERE, "..", "*", "bench.json.gz"))):
        d = json.load(gzip.open(f))
        for i, r in enumerate(d.get("runs", [])):
            if r.get("series"):
                yield f.split(os.sep)[-2], i, r


def replay(cls, series, **kw):
    c = cls(**kw)
    fired = []
    for k, row in enumerate(series):
        why = c.observe(row[1] / row[5], row[5], row[6] if row[6] is not None else math.nan)
        if why:
            fired.append((k, round(row[5], 1), why[:60]))
    return fired


if __name__ == "__main__":
    other = variant(sys.argv[1])
    for name, i, r in runs():
        base = replay(stability.StepCeiling, r["series"], factor=6.0)
        new = replay(other, r["series"], factor=6.0)
        tag = "" if [b[0] for b in base] == [n[0] for n in new] else "  <-- differs"
        ttt = r["time_to_target_s"]
        print(f"{name:34s} {i} {r['strategy']:5s} n={len(r['series']):3d} "
              f"acc={r['final_accuracy']:.3f} t={ttt if ttt is None else round(ttt, 1)} "
              f"shipped={[b[:2] for b in base]} variant={[n[:2] for n in new]}{tag}")
