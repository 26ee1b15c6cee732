"""Where a round's (or a stock step's) time goes, phase by phase along its critical path,
so that the phases add up to the measured round.

Three clocks meet here, all on one host: the chief's ``perf_counter`` (the engine's round
and task times, the task log's closures, the applier's timings), and the workers'
``time.time()`` stamps that each emulated step writes (first op, real work done, end of its
device time: :meth:`tf_hetero.emulation.device.EmulatedDevice.stamps_per_worker`). ``offset``
(``time.time() - time.perf_counter()``, read on the chief) puts the stamps on the chief's
clock; on one host the two clocks differ by a constant.

A **round** (round strategies) is timed from its opening to the next opening of its book,
along the task that closed it (the last to finish before the close):

- ``dispatch``: round opened -> that task's worker thread on the chief picked it up;
- ``start``: -> the closure handed to TensorFlow (the engine's start of the task, its task
  code);
- ``launch``: -> the task's step ran its first op on the worker (TF's closure call, the
  RPC, the worker's executor, and the task's input read before its step);
- ``device``: -> the end of its (last step's) emulated device time: the real compute, the
  variable reads and the accumulator writes run inside it unless they overrun the budget
  (``over_budget``, beside the table, says by how much);
- ``return``: -> the task's result back on the chief's worker thread (a push after the
  device time, the result's fetch, the RPC back);
- ``close``: -> the engine closed the round (its bookkeeping of the task);
- ``apply_handoff``: -> the apply function called on the chief's apply thread (the apply's
  arguments built, the queue);
- ``apply_call``: -> its result fetched (the chief <-> PS hops of the apply);
- ``apply_book``: -> the engine recorded the update (``apply_finished``);
- ``gap``: -> the book's next round opened (fit's loop, the engine's scheduling).

An apply the next round does not wait for (overlapped rounds) counts only up to that round's
opening. A **step** (stock PSS, asynchronous rows) is timed from one closure's pick-up on a
worker thread to that worker thread's next: ``launch``, ``device``, ``return`` as above, and
``idle`` (the worker thread waiting for fit's next closure).

>>> from types import SimpleNamespace as NS
>>> t = NS(worker=0, t_start=1.010, t_end=1.150, state="done", drain=False)
>>> r0 = NS(id=0, kind="train", applied=1, book=0, t_open=1.000, t_close=1.152,
...         t_applied=1.170, tasks=[t])
>>> r1 = NS(id=1, kind="train", applied=1, book=0, t_open=1.175, t_close=1.3, t_applied=1.4,
...         tasks=[])
>>> stamps = [[[1.015, 1.030, 1.140, 0.125]]]  # first op, work done, device end, budget
>>> p = round_profile([r0, r1], stamps, offset=0.0, applies=[(0, 1.153, 1.155, 1.165)])
>>> {k: round(v, 1) for k, v in p["phases"].items()}  # doctest: +NORMALIZE_WHITESPACE
{'dispatch': 10.0, 'start': 0.0, 'launch': 5.0, 'device': 125.0, 'return': 10.0, 'close': 2.0,
 'apply_handoff': 3.0, 'apply_call': 10.0, 'apply_book': 5.0, 'gap': 5.0}
>>> round(p["sum_ms"], 1), round(p["measured_ms"], 1), p["count"]
(175.0, 175.0, 1)
"""

from __future__ import annotations

import bisect
import statistics
from typing import Sequence

__all__ = ["ROUND_PHASES", "STEP_PHASES", "round_profile", "step_profile", "match_stamps",
           "format_profiles"]

ROUND_PHASES = ("dispatch", "start", "launch", "device", "return", "close", "apply_handoff",
                "apply_call", "apply_book", "gap")
STEP_PHASES = ("launch", "device", "return", "idle")


class _Stamps:
    """One worker's step stamps on the chief's clock, searchable by time."""

    def __init__(self, rows, offset: float):
        rows = sorted((float(r[0]) - offset, float(r[1]) - offset, float(r[2]) - offset,
                       float(r[3])) for r in rows)
        self.rows = rows
        self.firsts = [r[0] for r in rows]

    def within(self, start: float, end: float) -> tuple | None:
        """``(first op, device end, budget s)`` of the steps that began in ``[start, end]``
        (one closure's steps: a worker thread runs one closure at a time), or ``None``."""
        lo = bisect.bisect_left(self.firsts, start)
        hi = bisect.bisect_right(self.firsts, end)
        steps = self.rows[lo:hi]
        if not steps:
            return None
        return steps[0][0], max(s[2] for s in steps), sum(s[3] for s in steps)


def match_stamps(stamps: Sequence, offset: float) -> list:
    """Each worker's stamps (rows of ``STAMP_COLUMNS``, ``time.time()`` seconds) on the
    chief's clock, for :func:`round_profile` and :func:`step_profile`."""
    return [_Stamps(rows, offset) for rows in stamps]


def _steps_of(task, per_worker: list) -> tuple | None:
    """:meth:`_Stamps.within` of an engine task's closure on its worker (``None``: none)."""
    if task.worker is None or task.worker >= len(per_worker):
        return None
    return per_worker[task.worker].within(task.t_start, task.t_end)


def _called(task) -> float:
    """When the task's closure was handed to TF (its pick-up if the engine did not say)."""
    return getattr(task, "t_call", 0.0) or task.t_start


def _mean_ms(values: dict) -> dict:
    return {k: 1e3 * statistics.fmean(v) if v else float("nan") for k, v in values.items()}


def _result(unit: str, phases: dict, measured: list, extra: dict, first: float | None,
            unmatched: int) -> dict:
    means = _mean_ms(phases)
    count = len(measured)
    return {"unit": unit, "phases": means, "sum_ms": sum(means.values()) if count else float("nan"),
            "measured_ms": 1e3 * statistics.fmean(measured) if count else float("nan"),
            "count": count, "unmatched": unmatched,
            "first_ms": None if first is None else 1e3 * first, **_mean_ms(extra)}


def round_profile(rounds, stamps: Sequence, offset: float, applies=(), skip: int = 0) -> dict:
    """The mean round along its critical path (the module's docstring), over ``rounds``
    (engine :class:`~tf_hetero.engine.state.Round` objects with their tasks) that trained,
    were applied and have a next round in their book, leaving out each book's first
    ``skip`` rounds (tracing; ``first_ms``: the first round's open -> next open).

    ``stamps``: per worker, step rows (``STAMP_COLUMNS``); ``offset``: ``time.time() -
    time.perf_counter()`` on the chief; ``applies``: the applier's ``(round_id, submitted,
    called, returned)``. A round whose closing task has no stamps (the ring overwritten) or
    whose apply has no timing is left out and counted in ``unmatched``.

    Returns ``unit`` (``"round"``), ``phases`` (mean ms each), ``sum_ms``, ``measured_ms``
    (the mean open -> next open of the same rounds), ``count``, ``unmatched``, ``first_ms``,
    ``over_budget_ms`` (the closing task's device phase beyond its emulated budget),
    ``budget_ms`` (the closing task's emulated device budget: the device phase is never
    shorter),
    ``task_wait_ms`` (a mean task's wait from its end to the close: the barrier the other
    tasks pay) and
    ``launch_all_ms`` (the launch phase of a mean task of the round, not only the closing one).
    """
    per_worker = stamps if stamps and isinstance(stamps[0], _Stamps) else \
        match_stamps(stamps, offset)
    timing = {a[0]: a[1:] for a in applies}
    books: dict = {}
    for r in rounds:
        books.setdefault(r.book, []).append(r)
    phases = {k: [] for k in ROUND_PHASES}
    extra = {"over_budget_ms": [], "budget_ms": [], "task_wait_ms": [], "launch_all_ms": []}
    measured, unmatched, first = [], 0, None
    for book in books.values():
        book.sort(key=lambda r: r.t_open)
        seen = 0
        for r, nxt in zip(book, book[1:]):
            if str(r.kind) != "train" or r.applied <= 0:
                continue
            seen += 1
            if seen == 1 and first is None:
                first = nxt.t_open - r.t_open
            if seen <= skip:
                continue
            done = [t for t in r.tasks if str(t.state) == "done" and not t.drain
                    and t.t_end and t.t_end <= r.t_close]
            if not done or r.id not in timing:
                unmatched += 1
                continue
            spans = [(t, _steps_of(t, per_worker)) for t in done]
            last, steps = max(spans, key=lambda pair: pair[0].t_end)
            if steps is None:
                unmatched += 1
                continue
            first_op, device_end, budget = steps
            _, called, returned = timing[r.id]  # submitted: inside apply_handoff
            cap = min(r.t_applied, nxt.t_open)  # an overlapped apply: only what was waited for

            def clip(x, cap=cap, close=r.t_close):
                return min(max(x, close), cap)

            points = [r.t_open, last.t_start, _called(last), first_op, device_end, last.t_end,
                      r.t_close, clip(called), clip(returned), clip(r.t_applied), nxt.t_open]
            for name, a, b in zip(ROUND_PHASES, points, points[1:]):
                phases[name].append(b - a)
            extra["over_budget_ms"].append(max(device_end - first_op - budget, 0.0))
            extra["budget_ms"].append(budget)
            extra["task_wait_ms"].append(statistics.fmean(r.t_close - t.t_end for t in done))
            extra["launch_all_ms"].append(statistics.fmean(
                span[0] - _called(t) for t, span in spans if span is not None))
            measured.append(nxt.t_open - r.t_open)
    return _result("round", phases, measured, extra, first, unmatched)


def step_profile(records, stamps: Sequence, offset: float, skip: int = 0) -> dict:
    """The mean asynchronous step (stock PSS), pick-up to the same worker thread's next
    pick-up (the module's docstring), over task ``records`` (``worker``, ``start``,
    ``end``: :class:`~tf_hetero.telemetry.records.TaskRecord`), leaving out each worker's
    first ``skip`` steps (``first_ms``: the first step's interval). Same keys as
    :func:`round_profile` (no ``task_wait_ms``).

    >>> from tf_hetero.telemetry.records import TaskRecord
    >>> recs = [TaskRecord(0, 1.000, 1.110), TaskRecord(0, 1.112, 1.222)]
    >>> stamps = [[[1.004, 1.02, 1.105, 0.1], [1.116, 1.13, 1.217, 0.1]]]
    >>> p = step_profile(recs, stamps, offset=0.0)
    >>> {k: round(v, 1) for k, v in p["phases"].items()}
    {'launch': 4.0, 'device': 101.0, 'return': 5.0, 'idle': 2.0}
    >>> round(p["sum_ms"], 1), round(p["measured_ms"], 1)
    (112.0, 112.0)
    """
    per_worker = match_stamps(stamps, offset)
    phases = {k: [] for k in STEP_PHASES}
    extra = {"over_budget_ms": []}
    measured, unmatched, first = [], 0, None
    workers: dict = {}
    for rec in records:
        workers.setdefault(rec.worker, []).append(rec)
    for w, recs in sorted(workers.items()):
        recs.sort(key=lambda r: r.start)
        for i, (rec, nxt) in enumerate(zip(recs, recs[1:])):
            if i == 0 and first is None:
                first = nxt.start - rec.start
            if i < skip:
                continue
            steps = per_worker[w].within(rec.start, rec.end) if w < len(per_worker) else None
            if steps is None:
                unmatched += 1
                continue
            first_op, device_end, budget = steps
            points = [rec.start, first_op, device_end, rec.end, nxt.start]
            for name, a, b in zip(STEP_PHASES, points, points[1:]):
                phases[name].append(b - a)
            extra["over_budget_ms"].append(max(device_end - first_op - budget, 0.0))
            measured.append(nxt.start - rec.start)
    return _result("step", phases, measured, extra, first, unmatched)


def format_profiles(rows: Sequence[dict]) -> list[str]:
    """Markdown lines: one table of round rows and one of step rows, each row's phases (mean
    ms), their sum beside the measured round / step, and CPU ms per round / step by process
    role (``row["round_profile"]``, ``row["strategy"]``; none: no lines).

    >>> p = {"unit": "step", "phases": {"launch": 4.0, "device": 101.0, "return": 5.0,
    ...      "idle": 2.0}, "sum_ms": 112.0, "measured_ms": 112.0, "count": 90,
    ...      "unmatched": 0, "first_ms": 900.0, "over_budget_ms": 1.0,
    ...      "cpu_ms": {"chief": 9.0, "worker": 20.0, "ps": 8.0}}
    >>> print("\\n".join(format_profiles([{"strategy": "pss", "round_profile": p}])))
    <BLANKLINE>
    Where a step's time goes (mean ms per step per worker, docs/MEASUREMENT.md): the phases add up to the measured step
    <BLANKLINE>
    | strategy | launch | device | return | idle | sum | measured | over budget | first | CPU chief / workers / PS | n |
    |---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|
    | pss | 4.0 | 101.0 | 5.0 | 2.0 | 112.0 | 112.0 | 1.0 | 900 | 9.0 / 20.0 / 8.0 | 90 |
    """
    lines = []
    for unit, names in (("round", ROUND_PHASES), ("step", STEP_PHASES)):
        mine = [r for r in rows if (r.get("round_profile") or {}).get("unit") == unit]
        if not mine:
            continue
        per = "per round" if unit == "round" else "per step per worker"
        lines += ["", f"Where a {unit}'s time goes (mean ms {per}, docs/MEASUREMENT.md): the "
                      f"phases add up to the measured {unit}", "",
                  "| strategy | " + " | ".join(n.replace("_", " ") for n in names)
                  + " | sum | measured | over budget | first | CPU chief / workers / PS | n |",
                  "|---|" + "---:|" * (len(names) + 4) + "---|---:|"]
        for r in mine:
            p = r["round_profile"]
            cpu = p.get("cpu_ms") or {}
            cpu_cell = (" / ".join(f"{cpu[k]:.1f}" for k in ("chief", "worker", "ps"))
                        if cpu else "")
            first = f"{p['first_ms']:.0f}" if p.get("first_ms") is not None else ""
            lines.append(f"| {r['strategy']} | "
                         + " | ".join(f"{p['phases'][n]:.1f}" for n in names)
                         + f" | {p['sum_ms']:.1f} | {p['measured_ms']:.1f} | "
                         f"{p['over_budget_ms']:.1f} | {first} | {cpu_cell} | {p['count']} |")
        if unit == "round":  # off the critical path, for what the closing task's figures hide
            lines += ["", "Beside the critical path, mean ms per task: launch / wait from its "
                          "end to the close: " + "; ".join(
                              f"{r['strategy']} {r['round_profile']['launch_all_ms']:.1f} / "
                              f"{r['round_profile']['task_wait_ms']:.1f}" for r in mine)]
    return lines
