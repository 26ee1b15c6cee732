"""The report of ``tf-hetero bench``, ``tf-hetero demo``, ``tf-hetero sim`` and the Colab
notebooks: rows summarized over repeats and learning rates (:func:`summarize`), the tables
(:func:`format_table`, the bench's; :func:`paired_table`, per repeat; :func:`compare_table`,
the demo's, relative to stock PSS; :func:`worker_table`, one strategy per worker), the
figures (:func:`plot_runs`: accuracy vs wall time and each row's task timeline;
:func:`plot_workers`: one strategy's timeline and tasks per worker) and the files
(:func:`write`). It reads the rows' JSON keys (:mod:`tf_hetero.tools.benchrow`) and
trains nothing: no TensorFlow.

Timings are measured, not asserted: compare rows of one run, as ratios. A run that did not
reach the target counts in a row's median time to target as the slowest run, not dropped
(below: 2.0, not reached and 4.0 have the median 4.0).

>>> runs = [dict(strategy="pss", samples_per_sec=s, final_accuracy=0.9, time_to_target_s=t,
...              efficiency=0.5) for s, t in ((300, 2.0), (100, None), (200, 4.0))]
>>> (row,) = summarize(runs, ["pss"])
>>> row["samples_per_sec"], row["repeats"], row["spread"]["time_to_target_s"]["median"]
(200, 3, 4.0)
"""

from __future__ import annotations

import math

import json
import os
import statistics
from typing import Callable

import numpy as np

from tf_hetero.telemetry import perf as metrics
from tf_hetero.telemetry import roundprofile

__all__ = ["summarize", "format_table", "paired_table", "compare_table", "worker_table",
           "plot_runs", "plot_workers", "write", "SPREAD_KEYS"]


#: Figures reported as median [min-max] over repeats.
SPREAD_KEYS = ("samples_per_sec", "efficiency", "time_to_target_s", "final_accuracy")


def summarize(runs: list[dict], strategies, num_classes: int = 10) -> list[dict]:
    """One row per strategy: at each learning-rate factor, the run with the median
    samples/s stands for its runs (``spread[key]``: median and range of each figure); the
    row is the factor with the best median time to target (then final accuracy), among
    factors that did not diverge (no divergence stop and final accuracy above 1.5x chance,
    in every run)."""
    rows = []
    for spec in strategies:
        candidates = []
        points = sorted({(r.get("lr_factor", 1.0), r.get("momentum")) for r in runs
                         if r["strategy"] == spec}, key=lambda p: (p[0], -(p[1] or 0.0)))
        for factor, momentum in points:
            mine = sorted((r for r in runs if r["strategy"] == spec
                           and (r.get("lr_factor", 1.0), r.get("momentum")) == (factor, momentum)),
                          key=lambda r: r["samples_per_sec"])
            row = dict(mine[(len(mine) - 1) // 2])
            row["repeats"] = len(mine)
            # A run that missed the target counts in the median as the slowest, not dropped.
            row["spread"] = {k: metrics.aggregate([r[k] for r in mine],
                                                  missing_is_worst=k == "time_to_target_s")
                             for k in SPREAD_KEYS}
            row["diverged"] = any(r.get("stopped") or r["final_accuracy"] <= 1.5 / num_classes
                                  for r in mine)
            candidates.append(row)
        ttt = [c["spread"]["time_to_target_s"]["median"] for c in candidates]
        # Keys are JSON keys: the lr factor, or "factor m=momentum" where momentum is gridded.
        grid = {(c.get("lr_factor", 1.0) if c.get("momentum") is None else
                 f"{c.get('lr_factor', 1.0)} m={c['momentum']}"): t
                for c, t in zip(candidates, ttt)}
        ok = [c for c in candidates if not c["diverged"]] or candidates
        best = min(ok, key=lambda c: (c["spread"]["time_to_target_s"]["median"] is None,
                                      c["spread"]["time_to_target_s"]["median"] or 0.0,
                                      -c["spread"]["final_accuracy"]["median"]))
        best["lr_grid"] = grid
        rows.append(best)
    return rows


def _cell(row: dict, key: str, fmt: str) -> str:
    a = row["spread"][key]
    if a["median"] is None:
        return "not reached" if key == "time_to_target_s" else ""
    text = format(a["median"], fmt)
    if row["repeats"] > 1:
        text += f" [{format(a['min'], fmt)}-{format(a['max'], fmt)}]"
        if a["missing"]:
            text += f" ({a['missing']} not reached)"
    return text


def _bytes(row: dict, key: str) -> str:
    value = row.get(key)
    return "" if value is None else f"{value:.0f}"


def format_table(results: list[dict], cfg, ideal: float) -> str:
    """The bench's table (Markdown): the settings, one line per row (median [min-max] over
    repeats) and the ideal, then the rows whose samples computed differ from the budget,
    where a round's time goes, and the CPU the processes spent. ``cfg``: the run's
    :class:`~tf_hetero.tools.benchconfig.BenchConfig`."""
    lines = [_settings_line(cfg), "",
             "| strategy | lr | samples/s | efficiency | time to target s | final accuracy | "
             "to PS B/sample | from PS B/sample | rounds | mean round ms | dropped tasks | "
             "tasks per worker | samples |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    budget = cfg.tasks * cfg.batch_size
    off_budget = []
    for r in results:
        round_ms = f"{r['mean_round_ms']:.0f}" if r.get("mean_round_ms") is not None else ""
        # Samples the reported run computed (all workers); None if not recorded.
        samples = sum(r["samples_per_worker"]) if r.get("samples_per_worker") else None
        lines.append(
            f"| {r['strategy']}{' (diverged)' if r.get('diverged') else ''} | "
            f"{r['learning_rate']:g} | {_cell(r, 'samples_per_sec', '.0f')} | "
            f"{_cell(r, 'efficiency', '.3f')} | {_cell(r, 'time_to_target_s', '.1f')} | "
            f"{_cell(r, 'final_accuracy', '.4f')} | {_bytes(r, 'bytes_to_ps_per_sample')} | "
            f"{_bytes(r, 'bytes_from_ps_per_sample')} | "
            f"{r['rounds']} | {round_ms} | "
            f"{r['dropped_tasks']} | {'/'.join(map(str, r['tasks_per_worker']))} | "
            f"{'' if samples is None else samples} |")
        if samples is not None and samples != budget:
            off_budget.append(f"{r['strategy']} {samples}")
    lines.append(f"| ideal | | {ideal:.0f} | 1.000 | | | | | | | | | |")
    if off_budget:
        # A fit of the same steps that reads other than steps x batch samples (EPSP whose
        # projected straggler sits rounds out: the others take its share in fewer steps)
        # has no equal sample budget: its final accuracy is not comparable.
        lines += ["", f"Samples computed other than the budget ({cfg.tasks} x {cfg.batch_size} = "
                      f"{budget}): {', '.join(off_budget)}; their final accuracy is at that "
                      "many samples."]
    return "\n".join(lines + _breakdown_lines(results) + _cpu_lines(results)
                     + roundprofile.format_profiles(results)
                     + noise_lines(results) + decision_lines(results))


def noise_lines(results: list[dict]) -> list[str]:
    """The gradient noise the round rows measured (policies/noise.py): the noise scale in
    samples, at the end of the reported run.

    >>> noise_lines([{"strategy": "hps", "noise_scale": 412.3}, {"strategy": "pss"}])
    ['', "Gradient noise scale at the end (samples; measured by the rounds' applies): hps 412"]
    """
    rows = [(r["strategy"], r.get("noise_scale")) for r in results]
    rows = [(name, b) for name, b in rows if b is not None and math.isfinite(b)]
    if not rows:
        return []
    return ["", "Gradient noise scale at the end (samples; measured by the rounds' applies): "
            + ", ".join(f"{name} {b:.0f}" for name, b in rows)]


def decision_lines(results: list[dict]) -> list[str]:
    """What the adaptive rows decided, and when (seconds from the fit's start): one line
    per row, each decision's mode, global batch and step gain.

    >>> decision_lines([{"strategy": "auto", "auto_decisions": [
    ...     {"t_s": 2.5, "mode": "rounds", "global_batch": 128, "gain": 4.0, "why": "..."}]}])
    ['', 'Decisions of the adaptive rows (s from the start: mode, global batch, step over the one-batch rate):', '- auto: 2.5 s sized 128 x4.00']
    """
    rows = [r for r in results if r.get("auto_decisions")]
    if not rows:
        return []
    out = ["", "Decisions of the adaptive rows (s from the start: mode, global batch, step "
               "over the one-batch rate):"]
    for r in rows:
        steps = "; ".join(f"{d['t_s']:.1f} s {'sized' if d['mode'] == 'rounds' else 'async'} "
                          f"{d['global_batch']} x{d['gain']:.2f}" for d in r["auto_decisions"])
        out.append(f"- {r['strategy']}: {steps}")
    return out


def _settings_line(cfg) -> str:
    """The bench table's first line: what every row ran with."""
    spread = f", median [min-max] of {cfg.repeats} runs" if cfg.repeats > 1 else ""
    if len(cfg.lr_factors) > 1:
        spread += (f"; each strategy at its best lr of {', '.join(f'{f:g}' for f in cfg.lr_factors)}"
                   " x the rule")
    if cfg.warmup_updates is None:
        spread += ("; lr warm-up over as many updates as an update averages micro-batches "
                   "(none for one-batch updates)")
    elif cfg.warmup_updates > 1:
        spread += f"; lr warm-up over {cfg.warmup_updates} updates for multi-micro-batch updates"
    return (f"profile `{cfg.profile}`, {cfg.workers} workers / {cfg.ps} PS, model {cfg.model}, "
            f"data {cfg.dataset} ({cfg.data_per_worker} per worker), {cfg.tasks} "
            f"micro-batches x {cfg.batch_size} samples "
            f"({cfg.steps_per_execution} per task), SGD lr {cfg.base_lr:g} x micro-batches per "
            f"update, momentum {cfg.momentum:g}, target accuracy {cfg.target_accuracy}; "
            f"times from fit() to the last update applied{spread}")


def _breakdown_lines(results: list[dict]) -> list[str]:
    """Where a round's time goes, per row with rounds (none: no lines)."""
    parts = ("dispatch", "task", "barrier", "apply", "gap")
    rows = [r for r in results if r.get("round_breakdown_ms")]
    if not rows:
        return []
    lines = ["", "Where a round's time goes (mean ms per round; docs/MEASUREMENT.md)", "",
             "| strategy | " + " | ".join(parts) + " | round |",
             "|---|" + "---:|" * (len(parts) + 1)]
    for r in rows:
        b = r["round_breakdown_ms"]
        lines.append(f"| {r['strategy']} | " + " | ".join(f"{b[p]:.0f}" for p in parts)
                     + f" | {sum(b[p] for p in parts if b[p] == b[p]):.0f} |")
    return lines


def _cpu_lines(results: list[dict]) -> list[str]:
    """CPU seconds per 1000 samples by process, per row that measured them (none: no lines)."""
    rows = [r for r in results if r.get("cpu_s_per_1000_samples")]
    if not rows:
        return []
    lines = ["", "CPU seconds per 1000 samples computed, by process, and the machine's "
                 "busy share over the fit (the chief's includes the accuracy "
                 "sampler's weight reads; docs/MEASUREMENT.md)", "",
             "| strategy | chief | workers | PS | total | machine busy |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        c = r["cpu_s_per_1000_samples"]
        busy = f"{r['machine_busy']:.0%}" if r.get("machine_busy") is not None else ""
        lines.append(f"| {r['strategy']} | {c['chief']:.2f} | {c['worker']:.2f} | "
                     f"{c['ps']:.2f} | {c['total']:.2f} | {busy} |")
    return lines


def paired_table(runs: list[dict], strategies, reference: str | None = None) -> str:
    """Each repeat's time to target and final accuracy per row, and every row's final
    accuracy minus ``reference``'s (default ``bsp`` if it ran, else the first row) in the
    same repeat. Every row of a repeat starts from the same seed, so these differences are
    paired: the seed's share of the luck, which moves a row's final accuracy by points from
    one repeat to the next, cancels out of them (medians of unpaired rows keep it). Rows
    whose schedule follows measured times (stock PSS, EPSP, H-PS) still vary between runs
    of one seed; only BSP is a function of it. Runs at one learning rate only (``""`` for an lr grid or a single repeat).

    >>> run = lambda s, rep, t, acc: dict(strategy=s, repeat=rep, time_to_target_s=t,
    ...                                   final_accuracy=acc)
    >>> runs = [run("bsp", 0, 90.0, 0.88), run("hps", 0, 40.0, 0.87),
    ...         run("bsp", 1, 95.0, 0.86), run("hps", 1, None, 0.87)]
    >>> print(paired_table(runs, ["bsp", "hps"]))
    Per repeat (every row of a repeat from the same seed): time to target s / final accuracy
    <BLANKLINE>
    | repeat | bsp | hps |
    |---:|---:|---:|
    | 0 | 90.0 / 0.8800 | 40.0 / 0.8700 |
    | 1 | 95.0 / 0.8600 | not reached / 0.8700 |
    | final accuracy - bsp's, points: mean [per repeat] |  | +0.0 [-1.0, +1.0] |
    """
    if len({r.get("lr_factor", 1.0) for r in runs}) > 1:
        return ""
    repeats = sorted({r["repeat"] for r in runs})
    if len(repeats) < 2:
        return ""
    by = {(r["repeat"], r["strategy"]): r for r in runs}
    reference = reference or ("bsp" if "bsp" in strategies else strategies[0])

    def cell(r):
        if r is None:
            return "failed"
        t = r["time_to_target_s"]
        return f"{'not reached' if t is None else format(t, '.1f')} / {r['final_accuracy']:.4f}"
    lines = ["Per repeat (every row of a repeat from the same seed): time to target s / final "
             "accuracy", "", "| repeat | " + " | ".join(strategies) + " |",
             "|---:|" + "---:|" * len(strategies)]
    lines += [f"| {rep} | " + " | ".join(cell(by.get((rep, s))) for s in strategies) + " |"
              for rep in repeats]
    diffs = []
    for s in strategies:
        d = [100 * (by[(rep, s)]["final_accuracy"] - by[(rep, reference)]["final_accuracy"])
             for rep in repeats if (rep, s) in by and (rep, reference) in by]
        diffs.append("" if s == reference or not d else
                     f"{statistics.mean(d):+.1f} [{', '.join(f'{x:+.1f}' for x in d)}]")
    lines.append(f"| final accuracy - {reference}'s, points: mean [per repeat] | "
                 + " | ".join(diffs) + " |")
    if "pss" in strategies:  # the async baseline every target is set against

        def ratio(rep, s):
            mine, stock = by.get((rep, s)), by.get((rep, "pss"))
            if not (mine and stock and mine["time_to_target_s"] and stock["time_to_target_s"]):
                return "-"
            return f"{stock['time_to_target_s'] / mine['time_to_target_s']:.2f}"
        lines.append("| stock PSS's time to target / the row's, per repeat | " + " | ".join(
            "" if s == "pss" else ", ".join(ratio(rep, s) for rep in repeats)
            for s in strategies) + " |")
    return "\n".join(lines)


def plot_runs(results: list[dict], cfg, path: str) -> str:
    """Writes the rows' figure to ``path`` (PNG): held-out accuracy vs seconds since
    ``fit()`` per row, the target as a line, and each row's per-worker task timeline (grey:
    a task not applied); returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    fig = plt.figure(figsize=(12, 3.2 + 1.1 * n))
    grid = fig.add_gridspec(1 + n, 1, height_ratios=[3] + [1] * n)
    ax = fig.add_subplot(grid[0])
    for r in results:
        curve = np.asarray(r["accuracy_curve"])
        ax.plot(curve[:, 0], curve[:, 1], label=r["strategy"])
    ax.axhline(cfg.target_accuracy, color="grey", ls=":", lw=1)
    ax.set_xlabel("seconds since fit() was called")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(f"profile {cfg.profile}: accuracy vs wall time")
    ax.legend(loc="lower right")
    colors = plt.get_cmap("tab10")
    span = max(max(e for _, _, e, _ in r["timeline"]) for r in results)
    for i, r in enumerate(results):
        axt = fig.add_subplot(grid[1 + i])
        _timeline(axt, [(w, s, e, colors(w % 10) if applied else "lightgrey")
                        for w, s, e, applied in r["timeline"]], linewidth=0.2)
        axt.set_xlim(0, span)
        axt.set_yticks(range(cfg.workers))
        axt.invert_yaxis()
        axt.set_ylabel(r["strategy"], rotation=0, ha="right", va="center")
        axt.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _timeline(ax, bars, linewidth: float) -> None:
    """Draws ``bars`` (worker, start, end, colour) as one bar per task in row ``worker``:
    one ``broken_barh`` per (worker, colour), as one ``barh`` per task took ~1 ms each
    (seconds for a bench run's thousands of tasks)."""
    rows: dict = {}
    for w, start, end, color in bars:
        rows.setdefault((w, color), []).append((start, end - start))
    for (w, color), spans in rows.items():
        ax.broken_barh(spans, (w - 0.35, 0.7), facecolors=color, edgecolor="white",
                       linewidth=linewidth)
    ax.set_ylim(-0.5, max((w for w, _ in rows), default=0) + 0.5)


# ------------------------------------------------------------- the demo's comparison


def _ratio(value, reference, invert: bool = False) -> str:
    if value is None or not reference:
        return ""
    if invert:  # times: the reference's seconds over the row's (> 1: sooner than PSS)
        return f"{reference / value:.2f}x" if value else ""
    return f"{value / reference:.2f}x"


def _idle_percent(row: dict) -> float:
    """Mean share of the row's span in which a worker ran no task (it waited)."""
    span = row["span_s"]
    busy: dict[int, float] = {}
    for worker, start, end, _ in row["timeline"]:
        busy[worker] = busy.get(worker, 0.0) + (end - start)
    workers = len(row["tasks_per_worker"])
    return 100.0 * sum(max(0.0, 1 - busy.get(w, 0.0) / span) for w in range(workers)) / workers


def _bytes_per_sample(row: dict):
    to_ps, from_ps = row.get("bytes_to_ps_per_sample"), row.get("bytes_from_ps_per_sample")
    return None if to_ps is None or from_ps is None else to_ps + from_ps


def compare_table(results: list[dict], cfg) -> str:
    """One Markdown table, each figure next to its ratio to stock PSS (the ``pss`` row), and
    the lines saying where each strategy comes out ahead, from the same numbers."""
    ref = next(r for r in results if r["strategy"] == "pss")
    ref_bytes = _bytes_per_sample(ref)
    lines = [f"profile `{cfg.profile}`, {cfg.workers} workers / {cfg.ps} PS, model {cfg.model}, "
             f"data {cfg.dataset}, {cfg.tasks} micro-batches x {cfg.batch_size} samples for "
             f"every strategy, SGD lr {cfg.base_lr:g} x micro-batches per update, momentum "
             f"{cfg.momentum:g}; time from fit() to accuracy {cfg.target_accuracy} on held-out "
             "data. In brackets: relative to stock PSS (time: PSS's seconds / the row's, > 1 is "
             "sooner; others: the row's / PSS's).", "",
             f"| strategy | time to {cfg.target_accuracy} s | samples/s | efficiency | "
             "final accuracy | bytes/sample to+from PS | updates | workers idle |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        t = r["time_to_target_s"]
        acc_delta = 100 * (r["final_accuracy"] - ref["final_accuracy"])
        b = _bytes_per_sample(r)
        lines.append(
            f"| {r['strategy']}{' (diverged)' if r.get('diverged') else ''} | "
            + (f"{t:.1f} ({_ratio(t, ref['time_to_target_s'], invert=True)})" if t is not None
               else "not reached")
            + f" | {r['samples_per_sec']:.0f} ({_ratio(r['samples_per_sec'], ref['samples_per_sec'])})"
            f" | {r['efficiency']:.2f} ({_ratio(r['efficiency'], ref['efficiency'])})"
            f" | {r['final_accuracy']:.3f} ({acc_delta:+.1f} pt)"
            f" | {f'{b:.0f} ({_ratio(b, ref_bytes)})' if b is not None else 'not measured'}"
            f" | {r['rounds']} | {_idle_percent(r):.0f}% |")
    return "\n".join(lines + [""] + _verdict(results, cfg))


def _verdict(results: list[dict], cfg) -> list[str]:
    """Where each strategy comes out ahead, read off the table's own numbers."""
    rows = [dict(r, total_bytes=_bytes_per_sample(r)) for r in results]

    def best(key, pick=max, fmt="{:.0f}"):
        candidates = [r for r in rows if r.get(key) is not None]
        if not candidates:
            return "none"
        winner = pick(candidates, key=lambda r: r[key])
        return f"{winner['strategy']} ({fmt.format(winner[key])})"

    lines = [f"- Soonest to {cfg.target_accuracy}: {best('time_to_target_s', min, '{:.1f} s')}; "
             f"most samples/s: {best('samples_per_sec')}; highest final accuracy: "
             f"{best('final_accuracy', fmt='{:.3f}')}"
             + f"; fewest bytes per sample: {best('total_bytes', min)}."]
    rounds = [r["strategy"] for r in results if r["strategy"] in ("bsp", "hps", "epsp")]
    if rounds:
        lines.append(f"- Exact rounds: {', '.join(rounds)} apply one update per round, equal to "
                     "one SGD step on the round's whole global batch (tested against large-batch "
                     "SGD); stock PSS applies every micro-batch's gradient as it arrives, "
                     "computed on weights the other workers' updates have changed since (stale).")
    lines.append("- The figure's timelines show where each strategy waits: gaps are time a "
                 "worker ran no task (`workers idle` above).")
    return lines


# ------------------------------------------------------------- one strategy in detail


def worker_table(r) -> str:
    """One strategy's per-worker table and the cluster summary as Markdown (``r``: a
    :class:`~tf_hetero.tools.demo.DemoResult`)."""
    fastest = min(r.slowdowns)
    lines = [f"strategy: {r.strategy}   profile: {r.config['profile']}   model: {r.config['model']}"
             f"   data: {r.config['dataset']}   batch/task: {r.config['batch_size']}", "",
             "| worker | class | configured ratio | tasks | mean ms | median ms | measured ratio |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for w in range(len(r.tasks)):
        lines.append(f"| {w} | {r.classes[w]} | {r.slowdowns[w] / fastest:.2f} | {r.tasks[w]} | "
                     f"{r.mean_ms[w]:.1f} | {r.median_ms[w]:.1f} | {r.measured_ratio[w]:.2f} |")
    lines += ["",
              "| samples | fit wall s | task span s | samples/s | ideal samples/s | efficiency | test accuracy |",
              "|---:|---:|---:|---:|---:|---:|---:|",
              f"| {r.samples} | {r.fit_wall_s:.1f} | {r.task_span_s:.1f} | {r.samples_per_sec:.1f} | "
              f"{r.ideal_samples_per_sec:.1f} | {r.efficiency:.3f} | {r.accuracy:.4f} |"]
    return "\n".join(lines)


def plot_workers(r, path: str) -> str:
    """Writes one strategy's task timeline and tasks-per-worker chart to ``path`` (PNG;
    ``r``: a :class:`~tf_hetero.tools.demo.DemoResult`); returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(r.tasks)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [3, 1]})
    colors = plt.get_cmap("tab10")
    _timeline(ax1, [(w, start, end, colors(w % 10)) for w, start, end in r.timeline],
              linewidth=0.3)
    ax1.set_yticks(range(n), [f"worker {w}\n({r.classes[w]})" for w in range(n)])
    ax1.invert_yaxis()
    ax1.set_xlabel("seconds since the first task")
    ax1.set_title(f"{r.strategy}: task timeline (profile {r.config['profile']})")
    ax2.bar(range(n), r.tasks, color=[colors(w % 10) for w in range(n)])
    for w in range(n):
        ax2.text(w, r.tasks[w], f"x{r.measured_ratio[w]:.2f}", ha="center", va="bottom", fontsize=8)
    ax2.set_xticks(range(n))
    ax2.set_xlabel("worker (label: measured slowdown)")
    ax2.set_ylabel("tasks")
    ax2.set_title(f"efficiency {r.efficiency:.2f}, accuracy {r.accuracy:.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------ files


def write(stem: str, payload: dict, table: str,
          figure: Callable[[str], object] | None = None) -> None:
    """Writes ``stem.json`` (``payload``), ``stem.md`` (``table``) and, with ``figure``,
    ``stem.png`` (``figure(path)`` draws it), making ``stem``'s folder if needed.

    >>> import tempfile
    >>> stem = os.path.join(tempfile.mkdtemp(), "runs", "bench")
    >>> write(stem, {"results": []}, "| strategy |")
    >>> open(stem + ".md").read(), json.load(open(stem + ".json"))
    ('| strategy |\\n', {'results': []})
    """
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    with open(stem + ".json", "w") as f:
        json.dump(payload, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(table + "\n")
    if figure is not None:
        figure(stem + ".png")
