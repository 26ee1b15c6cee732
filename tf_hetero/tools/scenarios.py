"""Named benchmark scenarios (``benchmarks/scenarios/*.json``) and the summary across them.

A scenario file holds a ``description`` and any :class:`~tf_hetero.tools.benchconfig.BenchConfig`
setting; what it leaves out comes from :data:`SCENARIO_DEFAULTS` (the harder offline problem,
MNIST-1D with a 1-D CNN, where batch size matters), not from the quick digits defaults.
``tf-hetero bench --scenario NAME`` (or ``all``) runs each scenario on its own local cluster,
writes its JSON, Markdown and PNG under ``OUT_DIR/NAME/``, and a summary whose rows are the
strategies, whose columns are the scenarios and whose cells are time-to-target relative to
stock PSS (``pss`` seconds / the row's seconds: above 1 is faster than async; with repeats,
the medians).

>>> rows = {"one_slow": [{"strategy": "pss", "time_to_target_s": 10.0},
...                      {"strategy": "bsp", "time_to_target_s": 20.0},
...                      {"strategy": "hps", "time_to_target_s": None}]}
>>> print(summary_table(rows))
| strategy | one_slow |
|---|---:|
| pss | 1.00 (10.0 s) |
| bsp | 0.50 |
| hps | not reached |
"""

from __future__ import annotations

import dataclasses
import json
import os

__all__ = ["Scenario", "SCENARIO_DEFAULTS", "DEFAULT_DIR", "load_scenarios", "summary_table",
           "merge_summary", "read_summary", "run_scenarios"]

#: Settings of every scenario unless its file says otherwise. Calibrated on MNIST-1D: one
#: sequential SGD run (batch 32, lr 0.02, momentum 0.9) reaches 0.84 test accuracy after
#: ~1,000 micro-batches and 0.88 after 1,600; with batch 128 and lr 0.08, 0.82 after the same
#: samples: large batches cost few samples here, unlike on 8x8 digits.
SCENARIO_DEFAULTS = {"dataset": "mnist1d", "model": "cnn1d", "tasks": 1600,
                     "steps_per_epoch": 200, "target_accuracy": 0.8}
#: Where ``--scenario`` looks, relative to the working directory (the repository root).
DEFAULT_DIR = os.path.join("benchmarks", "scenarios")
_SETTINGS = ("profile", "workers", "ps", "dataset", "model", "tasks", "steps_per_epoch",
             "batch_size", "target_accuracy", "base_lr", "momentum", "steps_per_execution",
             "data_per_worker")


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    settings: dict

    def config(self, **fixed):
        """The :class:`BenchConfig` of this scenario (``fixed``: strategies, repeats, ...)."""
        from tf_hetero.tools.benchconfig import BenchConfig

        return BenchConfig(**{**SCENARIO_DEFAULTS, **self.settings, **fixed})


def load_scenarios(names: str, directory: str = DEFAULT_DIR) -> list[Scenario]:
    """The scenarios named ``names`` (comma-separated, or ``"all"``) in ``directory``."""
    if not os.path.isdir(directory):
        raise ValueError(f"scenario folder {directory!r} not found. Fix: run from the "
                         "repository root (benchmarks/scenarios/) or pass --scenario-dir.")
    available = sorted(f[:-5] for f in os.listdir(directory) if f.endswith(".json"))
    wanted = available if names == "all" else [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in available]
    if unknown or not wanted:
        raise ValueError(f"unknown scenario(s) {unknown or names!r}. Fix: use 'all' or some of "
                         f"{', '.join(available)} (files in {directory}).")
    out = []
    for name in wanted:
        path = os.path.join(directory, name + ".json")
        with open(path) as f:
            data = json.load(f)
        extra = sorted(set(data) - set(_SETTINGS) - {"description"})
        if extra:
            raise ValueError(f"{path}: unknown key(s) {extra}. Fix: use description and "
                             f"{', '.join(_SETTINGS)}.")
        scenario = Scenario(name, data.get("description", ""),
                            {k: v for k, v in data.items() if k in _SETTINGS})
        scenario.config()  # every setting checked before any cluster starts
        out.append(scenario)
    return out


def _median(row: dict, key: str = "time_to_target_s"):
    """A row's figure: the median over its repeats when it has several (the bench table's
    figure), not that of the run that stands for the row (the one with the median
    samples/s), which is what ``row[key]`` holds.

    >>> _median({"time_to_target_s": 52.6, "spread": {"time_to_target_s": {"median": 49.4}}})
    49.4
    >>> _median({"time_to_target_s": 10.0}), _median({})
    (10.0, None)
    """
    spread = row.get("spread", {}).get(key)
    return spread["median"] if spread else row.get(key)


def summary_table(results: dict) -> str:
    """Markdown: strategies x scenarios, time-to-target relative to stock PSS."""
    names = list(results)
    strategies = list(dict.fromkeys(r["strategy"] for rows in results.values() for r in rows))
    lines = ["| strategy | " + " | ".join(names) + " |",
             "|---|" + "---:|" * len(names)]
    for s in strategies:
        cells = []
        for name in names:
            rows = {r["strategy"]: r for r in results[name]}
            ref = _median(rows.get("pss", {}))
            mine = _median(rows.get(s, {}))
            if s not in rows:
                cells.append("")
            elif mine is None:
                cells.append("not reached")
            elif s == "pss":
                cells.append(f"1.00 ({mine:.1f} s)")
            else:
                cells.append(f"{ref / mine:.2f}" if ref is not None else f"({mine:.1f} s)")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: A row's figures kept in ``summary.json`` (medians over repeats).
_SUMMARY_KEYS = ("time_to_target_s", "samples_per_sec", "efficiency", "final_accuracy")


def _commit() -> str | None:
    """The short commit of the checkout this module runs from, or None when it is not in one
    (recorded with each scenario: a summary merged from several runs says which tree measured
    which column). Asked in this file's folder, not the working directory, which may be any
    other repository of the user's."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def merge_summary(earlier: dict, name: str, rows: list[dict], commit: str | None) -> dict:
    """``summary.json``'s content with scenario ``name`` (re)placed by this run's ``rows``,
    each row reduced to its medians; earlier scenarios of the same out-dir are kept, so a suite
    too long for one sitting can be run a few scenarios at a time into one summary.

    >>> s = merge_summary({}, "one_slow", [{"strategy": "pss", "time_to_target_s": 9.0}], "abc")
    >>> s = merge_summary(s, "classes", [{"strategy": "pss", "time_to_target_s": 7.0}], "def")
    >>> s = merge_summary(s, "one_slow", [{"strategy": "pss", "time_to_target_s": 8.0}], "def")
    >>> [(n, e["commit"], e["rows"][0]["time_to_target_s"]) for n, e in s.items()]
    [('one_slow', 'def', 8.0), ('classes', 'def', 7.0)]
    """
    out = dict(earlier)
    out[name] = {"commit": commit,
                 "rows": [{"strategy": r["strategy"], **{k: _median(r, k) for k in _SUMMARY_KEYS}}
                          for r in rows]}
    return out


def read_summary(path: str) -> dict:
    """``summary.json`` as :func:`merge_summary` writes it ({} if there is none yet); a file of
    the earlier format (a list of rows per scenario, no commit) is read with commit None."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        data = json.load(f)
    return {name: entry if isinstance(entry, dict) else {"commit": None, "rows": entry}
            for name, entry in data.items()}


def _write_summary(out_dir: str, summary: dict) -> str:
    table = summary_table({name: entry["rows"] for name, entry in summary.items()})
    commits = sorted({entry["commit"] or "unknown" for entry in summary.values()})
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("Time to target relative to stock PSS (its seconds / the row's; > 1: faster "
                "than async; medians over repeats)\n\n" + table + "\n\nMeasured at commit "
                + ", ".join(commits) + " (per scenario: summary.json).\n")
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return table


def run_scenarios(scenarios: list[Scenario], out_dir: str, **fixed) -> tuple[dict, dict]:
    """Runs each scenario (one ``run_bench`` each) and returns ``(rows per scenario,
    {"scenario/strategy": error} of rows that failed)``.

    ``OUT_DIR/summary.{md,json}`` is rewritten after every scenario, merged with the scenarios
    an earlier run wrote there (:func:`merge_summary`): an interrupted suite keeps what it
    finished, and ``--scenario a,b`` then ``--scenario c`` into one out-dir make one summary.
    """
    from tf_hetero.tools.bench import run_bench

    os.makedirs(out_dir, exist_ok=True)
    summary = read_summary(os.path.join(out_dir, "summary.json"))
    kept = [name for name in summary if name not in {s.name for s in scenarios}]
    if kept:
        print(f"[tf-hetero bench] the summary keeps earlier runs' scenarios in {out_dir}: "
              + ", ".join(kept), flush=True)
    commit = _commit()
    results, failures = {}, {}
    for scenario in scenarios:
        where = os.path.join(out_dir, scenario.name)
        print(f"[tf-hetero bench] scenario {scenario.name}: {scenario.description}", flush=True)
        cfg = scenario.config(out_dir=where, json_path=os.path.join(where, "bench.json"), **fixed)
        failed: dict = {}
        results[scenario.name] = run_bench(cfg, failed)
        failures.update({f"{scenario.name}/{k}": v for k, v in failed.items()})
        summary = merge_summary(summary, scenario.name, results[scenario.name], commit)
        table = _write_summary(out_dir, summary)
    print("\n" + table + "\n", flush=True)
    if failures:
        print("[tf-hetero bench] rows that failed: " + "; ".join(f"{k}: {v}" for k, v in
                                                                 failures.items()), flush=True)
    return results, failures
