"""Per-PS load: bytes each PS task moves and the time it is busy, and how uneven that is.

Two sources, both per PS task:

- **placement** (any run of a tf-hetero strategy): the bytes one training step moves through
  each PS, from where the variables were placed (:mod:`tf_hetero.policies.placement`: each variable's
  bytes x accesses per step, read + gradient push for a trainable one). Times the tasks in a
  span, that is the bytes each PS served in it: per round (:func:`per_round`), per epoch
  (``Monitor.summary``, ``MonitorLogs``), per bench row.
- **emulated servers** (profile ``ps_mbps``, :mod:`tf_hetero.emulation.ps`): counters kept on
  each PS by the emulation, read from the chief: bytes served, busy seconds (service), wait
  seconds (requests queued for the PS), requests (:func:`served_figures` of two snapshots).

``ps_load_max_over_mean`` is the busiest PS's load over the mean load (1.0: even).

>>> step_figures([100, 300], tasks=2)
{'ps0_bytes': 200, 'ps1_bytes': 600, 'ps_load_max_over_mean': 1.5}
>>> before = {"bytes": [0, 0], "busy_s": [0.0, 0.0], "wait_s": [0.0, 0.0], "requests": [0, 0]}
>>> after = {"bytes": [10, 30], "busy_s": [0.1, 0.3], "wait_s": [0.0, 0.2], "requests": [2, 2]}
>>> f = served_figures(before, after)
>>> f["ps1_busy_s"], f["ps1_wait_s"], round(f["ps_busy_max_over_mean"], 3)
(0.3, 0.2, 1.5)
"""

from __future__ import annotations

from tf_hetero.policies.placement import max_over_mean

__all__ = ["step_figures", "served_figures", "per_round", "delta"]


def step_figures(step_bytes, tasks: int, us_per_byte=None) -> dict:
    """Bytes each PS served over ``tasks`` steps of ``step_bytes`` (per PS) each; with the
    emulated PS's ``us_per_byte``, also the service time that takes (no interference)."""
    out = {f"ps{p}_bytes": int(b * tasks) for p, b in enumerate(step_bytes)}
    out["ps_load_max_over_mean"] = max_over_mean(step_bytes)
    if us_per_byte is not None and any(us_per_byte):
        busy = [b * tasks * u / 1e6 for b, u in zip(step_bytes, us_per_byte)]
        out.update({f"ps{p}_service_s": s for p, s in enumerate(busy)})
        out["ps_service_max_over_mean"] = max_over_mean(busy)
    return out


def delta(before: dict, after: dict) -> dict:
    """Counters of ``after`` minus ``before`` (two ``EmulatedServers.totals()``)."""
    return {k: [a - b for a, b in zip(after[k], before[k])] for k in after}


def served_figures(before: dict, after: dict) -> dict:
    """Measured figures of the emulated PS tasks between two snapshots."""
    d = delta(before, after)
    out = {}
    for p in range(len(d["bytes"])):
        out[f"ps{p}_served_bytes"] = int(d["bytes"][p])
        out[f"ps{p}_busy_s"] = round(float(d["busy_s"][p]), 6)
        out[f"ps{p}_wait_s"] = round(float(d["wait_s"][p]), 6)
        out[f"ps{p}_requests"] = int(d["requests"][p])
    out["ps_busy_max_over_mean"] = max_over_mean(d["busy_s"])
    out["ps_served_max_over_mean"] = max_over_mean(d["bytes"])
    return out


def per_round(rounds, step_bytes) -> list[tuple[int, list[int]]]:
    """``(round id, bytes per PS)`` of each round: its tasks x the step's bytes per PS.

    >>> from tf_hetero.telemetry.records import RoundRecord
    >>> r = RoundRecord(0, 0.0, 0.1, 0.2, 3, {}, 3)
    >>> per_round([r], [10, 20])
    [(0, [30, 60])]
    """
    return [(r.id, [int(b * r.tasks) for b in step_bytes]) for r in rounds]
