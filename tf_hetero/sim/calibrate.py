"""Fits the cost model's constants from a measured ``tf-hetero bench`` JSON.

Each constant is measured on the rows that have its mechanism, from the per-task timeline
and the round breakdown the bench records, never by matching the samples/s that the
validation compares (docs/SIMULATOR.md):

- ``stock_s`` / ``task_s``: median step time beyond the profile's device time, after each
  worker's first step, on the unsized rows run by TF's closure queue (pss, asp) / by the
  engine (bsp, backup, ssp); ``jitter_quantiles_s``: quantiles of that excess minus its
  median (how much a step varies), on the same rows;
- ``local_push_s``: the same excess on rows with H-PS's buffer path (hpsfp, hpsint,
  hpspipe; device time from each worker's mean step size), minus ``task_s``;
  ``local_push_jitter_s``: how much more those rows' steps vary than the rows that size
  their tasks the same way without the buffer path (hps, hpsoverlap): the square root of the
  difference of their variances, each a robust one (interquartile range / 1.349), so a rare
  stall does not count as the push's spread (no such rows: the value is kept);
- ``first_task_s``: a worker's first step beyond its usual time (median over rows, workers);
- ``dispatch_s``: the round breakdown's mean dispatch wait is ``dispatch_s (N + 1) / 2``
  when the chief launches a round's N closures one at a time;
- ``apply_s``: the breakdown's mean apply less the first apply's extra (``first_apply_s``
  over the row's rounds); ``first_apply_s``: the first round's pause beyond the usual one, on
  rows whose rounds wait for all tasks;
- ``setup_s``: median ``setup_s``; ``epoch_s``: the pause between epochs of async rows;
- ``param_bytes``, ``wire_factor``: the gradient bytes, and the measured bytes to the PS
  over them (pss row).

``ps_s_per_byte`` is not identifiable from such a run; it keeps its value (``CostModel`` documents it).

>>> fit({"config": {"workers": 4}, "results": []})
Traceback (most recent call last):
...
ValueError: calibration: the bench JSON has no rows with a timeline. Fix: give a JSON written by tf-hetero bench (or benchmarks/measured/one_slow.json).
"""

from __future__ import annotations

import dataclasses
import json
import statistics

import numpy as np

from tf_hetero.emulation.profile import Profile
from tf_hetero.sim.costs import CostModel, DeviceTimes

__all__ = ["fit", "fit_file", "slim", "robust_sd", "uncontended", "quiet_step"]

#: Keys of a bench row kept in a slim copy (benchmarks/measured/): what calibration and
#: validation read.
ROW_KEYS = ("strategy", "samples_per_sec", "efficiency", "time_to_target_s", "final_accuracy",
            "rounds", "tasks", "applied_tasks", "dropped_tasks", "span_s", "setup_s",
            "ideal_samples_per_sec", "tasks_per_worker", "samples_per_worker",
            "round_breakdown_ms", "gradient_bytes_per_sample", "bytes_to_ps_per_sample",
            "bytes_from_ps_per_sample", "learning_rate", "mean_staleness")


#: Quantiles of the step jitter kept (percentiles). The simulator draws between them linearly,
#: which gives each gap 1/(k-1) of the draws: with 21 the gap from the 95th percentile to the
#: maximum (one 0.25 s stall among 3,168 steps) drew 5% of the steps and the mean delay was
#: 9.3 ms against 6.1 ms measured; with 101 it is 5.7 ms.
JITTER_QUANTILES = 101


def _per_worker(timeline, workers):
    out = [[] for _ in range(workers)]
    for w, start, end, _ in sorted(timeline, key=lambda r: r[1]):
        out[w].append((start, end))
    return out


def _idle_gaps(timeline) -> list[float]:
    """Pauses during which no step ran, in time order."""
    gaps, last = [], None
    for _, start, end, _ in sorted(timeline, key=lambda r: r[1]):
        if last is not None and start > last:
            gaps.append(start - last)
        last = end if last is None else max(last, end)
    return gaps


def _excess(row, cfg, device, sized: bool):
    """Per worker: (median step time beyond device time after the first step, first step's
    excess beyond that, the excesses minus their median)."""
    out = []
    for w, steps in enumerate(_per_worker(row["timeline"], cfg["workers"])):
        if len(steps) < 3:
            continue
        if sized:  # sizes are not in the timeline: the worker's mean step size
            rows = row["samples_per_worker"][w] / row["tasks_per_worker"][w]
            dev = [device.device_s(w, t, rows, cfg["batch_size"]) for t in range(len(steps))]
        else:
            dev = [device.device_s(w, t, cfg["batch_size"] * cfg.get("steps_per_execution", 1),
                                   cfg["batch_size"]) for t in range(len(steps))]
        extra = [(e - s) - d for (s, e), d in zip(steps, dev)]
        usual = statistics.median(extra[1:])
        out.append((usual, extra[0] - usual, [x - usual for x in extra[1:]]))
    return out


def _quantiles(jitter) -> tuple:
    return tuple(float(x) for x in np.quantile(jitter or [0.0],
                                               np.linspace(0.0, 1.0, JITTER_QUANTILES)))


def quiet_step(bench: dict) -> tuple[float, tuple]:
    """From a bench JSON of unsized rows (stock PSS, ASP; BSP): the median step time beyond
    the device time and the step jitter's quantiles (each step's excess minus its worker's
    median), as :func:`fit` reads them. For a run with nothing competing for the cores
    (one worker: docs/SIMULATOR.md, "The uncontended projection").

    >>> quiet_step({"config": {"workers": 1, "profile": "base_ms=100", "batch_size": 32},
    ...             "results": [{"strategy": "pss", "timeline": [
    ...                 [0, 0.0, 0.13, 0], [0, 0.2, 0.311, 0], [0, 0.4, 0.509, 0],
    ...                 [0, 0.6, 0.712, 0]]}]})[0]
    0.011
    """
    cfg = bench["config"]
    device = DeviceTimes(Profile.parse(cfg["profile"]), cfg["workers"])
    usual, jitter = [], []
    for r in bench.get("results", []):
        if not r.get("timeline"):
            continue
        for u, _, spread in _excess(r, cfg, device, sized=False):
            usual.append(u)
            jitter += spread
    if not usual:
        raise ValueError("quiet_step: the bench JSON has no row with a timeline of 3 steps "
                         "or more on a worker. Fix: give a JSON written by tf-hetero bench.")
    return round(float(statistics.median(usual)), 9), _quantiles(jitter)


def robust_sd(xs) -> float:
    """A standard deviation that ignores the tails: interquartile range / 1.349 (equal to
    the standard deviation for a normal sample).

    >>> round(robust_sd([0.0, 1.0, 2.0, 3.0, 100.0]), 3)
    1.483
    """
    q1, q3 = np.percentile(xs, [25, 75])
    return float(q3 - q1) / 1.349


def _kind(config) -> str:
    """A row's path from its engine config: "stock", "engine", "sized" or "local"."""
    return ("local" if config.local is not None else "stock" if not config.uses_engine
            else "sized" if config.granule else "engine")


def _excesses(rows: list, cfg: dict, device: DeviceTimes, configs: dict, base: CostModel):
    """Each path's per-step time beyond the device's (``excess``), the first steps', the
    exact paths' step jitter and the buffer path's own push jitter (``configs``: each row's
    engine config)."""
    kinds = {s: _kind(c) for s, c in configs.items()}
    excess = {k: [] for k in ("stock", "engine", "local", "sized")}
    firsts, jitter = [], []
    spreads = {}  # sized and buffer-path rows: each step's excess minus its worker's median
    for r in rows:
        kind = kinds[r["strategy"]]
        got = _excess(r, cfg, device, sized=kind in ("local", "sized"))
        excess[kind] += [u for u, _, _ in got]
        firsts += [f for _, f, _ in got]
        if kind in ("stock", "engine"):  # exact device times: the spread is the step's own
            jitter += [x for _, _, spread in got for x in spread]
        else:
            spreads[r["strategy"]] = [x for _, _, spread in got for x in spread]
    # The buffer path's own spread, against the rows that size their tasks alike without it
    # (their spread holds the same step jitter and size changes).
    local = [x for s, xs in spreads.items() if kinds[s] == "local" for x in xs]
    local_assigns = {type(configs[s].assign) for s in spreads if kinds[s] == "local"}
    alike = [x for s, xs in spreads.items()
             if kinds[s] == "sized" and type(configs[s].assign) in local_assigns for x in xs]
    push_jitter = (float(np.sqrt(max(0.0, robust_sd(local) ** 2 - robust_sd(alike) ** 2)))
                   if len(local) > 3 and len(alike) > 3 else base.local_push_jitter_s)
    return excess, firsts, jitter, push_jitter


def _median(xs: list, name: str) -> float:
    if not xs:
        raise ValueError(f"calibration: no row measures {name}. Fix: run the bench with "
                         "--strategies pss,asp,bsp,backup,ssp,epsp,hps,hpsfp (every kind).")
    return float(statistics.median(xs))


def fit(bench: dict, base: CostModel | None = None) -> CostModel:
    """A :class:`~tf_hetero.sim.costs.CostModel` fitted from ``bench`` (a bench JSON)."""
    from tf_hetero.strategies import registry

    base = base or CostModel()
    cfg = bench["config"]
    rows = [r for r in bench.get("results", []) if r.get("timeline")]
    if not rows:
        raise ValueError("calibration: the bench JSON has no rows with a timeline. Fix: give "
                         "a JSON written by tf-hetero bench (or "
                         "benchmarks/measured/one_slow.json).")
    n = cfg["workers"]
    configs = {r["strategy"]: registry.engine_config(r["strategy"], n) for r in rows}
    excess, firsts, jitter, push_jitter = _excesses(
        rows, cfg, DeviceTimes(Profile.parse(cfg["profile"]), n), configs, base)
    task_s = _median(excess["engine"], "task_s (bsp, backup, ssp)")
    breakdowns = [r["round_breakdown_ms"] for r in rows if r.get("round_breakdown_ms")]
    dispatch_s = _median([2e-3 * b["dispatch"] / (n + 1) for b in breakdowns], "dispatch_s")
    waits_all = [r for r in rows if type(configs[r["strategy"]].sync).__name__ == "AllTasks"
                 and r.get("round_breakdown_ms")]
    first_apply = []
    for r in waits_all:
        gaps = _idle_gaps(r["timeline"])
        if len(gaps) > 2:
            first_apply.append(gaps[0] - statistics.median(gaps))
    # The breakdown's mean apply includes the first one (tracing), which first_apply_s adds
    # once: apply_s is the mean without that extra (at 100 rounds, ~9 ms of a 28-ms mean).
    first_apply_s = max(0.0, _median(first_apply, "first_apply_s (bsp, epsp, hps)"))
    async_gaps = [g for r in rows if _kind(configs[r["strategy"]]) == "stock"
                  for g in _idle_gaps(r["timeline"])]
    stock = [r for r in rows if _kind(configs[r["strategy"]]) == "stock"]
    grad = rows[0]["gradient_bytes_per_sample"] * cfg["batch_size"]
    wire = (stock[0]["bytes_to_ps_per_sample"] / stock[0]["gradient_bytes_per_sample"]
            if stock and stock[0].get("bytes_to_ps_per_sample") else base.wire_factor)
    return dataclasses.replace(
        base,
        dispatch_s=dispatch_s,
        stock_s=_median(excess["stock"], "stock_s (pss, asp)"),
        task_s=task_s,
        local_push_s=max(0.0, _median(excess["local"], "local_push_s (hpsfp, hpsint, hpspipe)")
                         - task_s),
        local_push_jitter_s=push_jitter,
        first_task_s=max(0.0, _median(firsts, "first_task_s")),
        jitter_quantiles_s=_quantiles(jitter),
        apply_s=max(0.0, _median([b["apply"] * 1e-3 - (first_apply_s / b["rounds"]
                                                       if b.get("rounds") else 0.0)
                                  for b in breakdowns], "apply_s")),
        first_apply_s=first_apply_s,
        setup_s=_median([r["setup_s"] for r in rows], "setup_s"),
        epoch_s=max(0.0, _median(async_gaps, "epoch_s (pss, asp)") - dispatch_s),
        param_bytes=grad, wire_factor=wire,
        source=f"fitted from {bench.get('source', 'a bench JSON')}: profile {cfg['profile']}, "
               f"{n} workers, rows {', '.join(r['strategy'] for r in rows)}")


def uncontended(fitted: CostModel, closure_s: float, apply_s: float,
                source: str = "", jitter_quantiles_s: tuple | None = None) -> CostModel:
    """The cost model of a host with a core per task, from one ``fitted`` on this 2-core
    machine: every step closure, the engine's and TF's own alike (``task_s``, ``stock_s``),
    costs ``closure_s``, what a closure measured here costs beyond its device time when no
    burst of launches competes with it; a round's apply costs ``apply_s``, its own chief <->
    PS hops; with ``jitter_quantiles_s`` (a quiet run's, :func:`quiet_step`), steps vary as
    there. Everything else is kept as fitted (the chief's dispatch, the first steps and
    applies, the set-up; the step jitter without ``jitter_quantiles_s``): contended figures,
    so upper bounds. The values and their sources: docs/SIMULATOR.md, "The uncontended
    projection".

    >>> u = uncontended(CostModel(task_s=0.028, stock_s=0.014, apply_s=0.028), 0.0095, 0.0102)
    >>> u.task_s == u.stock_s == 0.0095, u.apply_s
    (True, 0.0102)
    >>> uncontended(CostModel(), 0.01, 0.01, jitter_quantiles_s=(-0.001, 0.0, 0.002)
    ...             ).jitter_quantiles_s
    (-0.001, 0.0, 0.002)
    """
    jitter = (fitted.jitter_quantiles_s if jitter_quantiles_s is None
              else tuple(jitter_quantiles_s))
    return dataclasses.replace(
        fitted, task_s=closure_s, stock_s=closure_s, apply_s=apply_s,
        jitter_quantiles_s=jitter,
        source=f"uncontended: {source or 'closure_s and apply_s given'}; the rest as "
               f"{fitted.source}")


def fit_file(path: str, out: str | None = None) -> CostModel:
    """Fits from the bench JSON at ``path``; writes the constants to ``out`` if given."""
    try:
        with open(path) as f:
            bench = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"calibration: cannot read bench JSON {path!r} ({e}). Fix: give the "
                         "--json file of a tf-hetero bench run.") from None
    if not isinstance(bench, dict) or "config" not in bench or "results" not in bench:
        raise ValueError(f"calibration: {path!r} is not a bench JSON (no 'config' and "
                         "'results'). Fix: give the --json file of a tf-hetero bench run.")
    bench.setdefault("source", path)
    model = fit(bench)
    if out:
        model.save(out)
    return model


def slim(bench: dict, timeline: bool = True) -> dict:
    """A small copy of a bench JSON with what calibration (``timeline=True``) and
    validation read: the config, the ideal and, per row, :data:`ROW_KEYS`; the timeline
    rounded to 0.1 ms."""
    rows = []
    for r in bench["results"]:
        row = {k: r.get(k) for k in ROW_KEYS}
        if timeline:
            row["timeline"] = [[w, round(s, 4), round(e, 4), a] for w, s, e, a in r["timeline"]]
        rows.append(row)
    return {"config": bench["config"], "ideal_samples_per_sec": bench.get("ideal_samples_per_sec"),
            "results": rows}
