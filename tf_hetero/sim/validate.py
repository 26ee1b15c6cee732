"""Validation: simulated samples/s against measured bench runs (benchmarks/measured/).

For every row of a measured bench JSON, the simulator runs the same strategy under the
same config, with :data:`SEEDS` seeds of its random step delays, and takes the median (as
the bench takes the median of its repeats); the error is simulated / measured - 1. The ranking check compares every pair
of rows whose measured samples/s differ by more than the tolerance: the simulator must order
them the same way (closer pairs are ties within what the validation can resolve).

>>> misordered([("a", 100, 90), ("b", 200, 210), ("c", 105, 120)], tolerance=0.15)
[]
>>> misordered([("a", 100, 220), ("b", 200, 210)], tolerance=0.15)
[('a', 'b')]
"""

from __future__ import annotations

import glob
import json
import os
import statistics
from types import SimpleNamespace

__all__ = ["MEASURED_DIR", "TOLERANCE", "measured_files", "compare", "misordered", "table"]

#: The measured runs the validation compares against (slim copies, with how they were made).
MEASURED_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks", "measured")
#: Simulated repeats per row (seeds 0, 1, ...), of which the median is compared.
SEEDS = 3
#: Largest accepted |simulated / measured - 1| of samples/s (issue 12).
TOLERANCE = 0.15


def measured_files(directory: str = MEASURED_DIR) -> list[str]:
    return sorted(glob.glob(os.path.join(directory, "*.json")))


def compare(path: str, costs, seeds: int = SEEDS) -> list[tuple[str, float, float]]:
    """``(strategy, measured samples/s, median simulated samples/s)`` for every row of
    ``path``."""
    from tf_hetero.sim.run import simulate_run

    with open(path) as f:
        bench = json.load(f)
    out = []
    for r in bench["results"]:
        sims = [simulate_run(r["strategy"], SimpleNamespace(**{**bench["config"], "seed": s}),
                             costs)["samples_per_sec"] for s in range(seeds)]
        out.append((r["strategy"], r["samples_per_sec"], statistics.median(sims)))
    return out


def misordered(rows, tolerance: float = TOLERANCE) -> list[tuple[str, str]]:
    """Pairs ``(slower, faster)`` (measured, by more than ``tolerance``) that the
    simulator orders the other way."""
    out = []
    for a, ma, sa in rows:
        for b, mb, sb in rows:
            if mb > ma * (1 + tolerance) and not sb > sa:
                out.append((a, b))
    return out


def table(results: dict) -> str:
    """Markdown: strategy x scenario, measured / simulated samples/s and error %
    (``results``: ``{scenario: compare(...)}``)."""
    scenarios = list(results)
    lines = ["| strategy | " + " | ".join(f"{s}: measured | simulated | error" for s in scenarios)
             + " |", "|---|" + "---:|---:|---:|" * len(scenarios)]
    names = list(dict.fromkeys(s for rows in results.values() for s, _, _ in rows))
    for name in names:
        cells = []
        for s in scenarios:
            row = next((r for r in results[s] if r[0] == name), None)
            cells += (["", "", ""] if row is None else
                      [f"{row[1]:.0f}", f"{row[2]:.0f}", f"{100 * (row[2] / row[1] - 1):+.1f}%"])
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
