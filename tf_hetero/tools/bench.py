"""``tf-hetero bench``: strategies side by side on one heterogeneous local cluster.

    tf-hetero bench --strategies pss,bsp,backup,ssp --workers 4 --ps 2 --profile slow=3:4 \\
        --json runs/bench/bench.json

One invocation starts one multi-process :class:`~tf_hetero.cluster.local.LocalCluster` and
trains the same model on the same data with the same sample budget under each strategy in
turn (this process is the chief). The learning-rate rule is the same for all: SGD with
momentum, ``lr = base_lr x micro-batches per update`` (the linear rule,
:mod:`tf_hetero.policies.lr`: N for BSP, N-b for backup workers, 1 for the asynchronous
strategies). The stock ``tf.distribute.ParameterServerStrategy`` (``pss``) is always included
as the reference row, and the ideal (sum of the workers' capacities) as the last row.

The parts: the configuration (:mod:`tf_hetero.tools.benchconfig`), one row, trained and
measured (:mod:`tf_hetero.tools.benchrow`, which lists the JSON keys of a row), and the
report (:mod:`tf_hetero.tools.report`); this module runs the rows. Before the timed runs,
every row runs one short untimed fit (:func:`warm_up`: the process's start-up is no row's).
``--repeats K`` runs every row K times, each repeat in an order shuffled from the seed, and
reports the median and range (docs/MEASUREMENT.md): per strategy, the run with the median
samples/s, with ``spread``, in ``results``; every run in ``runs``.

Timings are measured, not asserted: compare rows of one run, as ratios.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import random
import statistics
import time

from tf_hetero.emulation.profile import Profile
from tf_hetero.tools import report
from tf_hetero.strategies import registry
from tf_hetero.tools.benchconfig import BenchConfig, split_row, warm_up_tasks
from tf_hetero.tools.benchrow import run_strategy

__all__ = ["run_bench", "warm_up", "failure_line"]


def warm_up(cluster, cfg: BenchConfig, profile: Profile) -> None:
    """One short untimed fit of every row on the fresh cluster. The first fit in a process
    pays one-time start-up costs (measured: ``bsp+rebalance``, first in its runs, set up in
    2.8-3.9 s against 1.4-2.3 s for every later fit, and every row's time to target counts
    its set-up), which the shuffled order left on whichever row ran first in the first
    repeat. A row that fails here is reported and runs all the same (its timed runs report
    the error)."""
    tasks = warm_up_tasks(cfg)
    warm = dataclasses.replace(cfg, tasks=tasks, steps_per_epoch=tasks)
    t = time.perf_counter()
    for spec in cfg.strategies:
        try:
            run_strategy(spec, cluster, warm, profile, seed=cfg.seed)
        except Exception as e:  # pylint: disable=broad-except
            print(f"[tf-hetero bench] warm-up of {spec} failed ({type(e).__name__}); its "
                  "timed runs will report the error.", flush=True)
        gc.collect()
    print(f"[tf-hetero bench] warm-up: {warm.tasks} tasks of each row, untimed, "
          f"{time.perf_counter() - t:.0f}s", flush=True)


def run_bench(cfg: BenchConfig, failures: dict | None = None) -> list[dict]:
    """Runs every row of ``cfg`` on one local cluster, writes the JSON, Markdown and PNG, and
    returns the table's rows. A row that raises is reported (in the table, the JSON and
    ``failures``: ``{strategy: error}``) and the others still run."""
    from tf_hetero.cluster.local import LocalCluster
    from tf_hetero.telemetry.cpu import CpuMeter
    from tf_hetero.telemetry.traffic import TrafficMeter

    profile = Profile.parse(cfg.profile)
    os.makedirs(cfg.out_dir, exist_ok=True)
    print(f"[tf-hetero bench] {', '.join(cfg.strategies)} on {cfg.workers} workers / {cfg.ps} PS, "
          f"profile {profile.spec()}", flush=True)
    with LocalCluster(cfg.workers, cfg.ps, profile=profile, processes=True) as cluster:
        meter = TrafficMeter.for_cluster(cluster)
        cpu_meter = CpuMeter.for_cluster(cluster)
        warm_up(cluster, cfg, profile)
        runs, failed = _run_repeats(cluster, cfg, profile, meter, cpu_meter)
    if not runs:
        raise RuntimeError(f"every row failed: {failed}")
    results = _write_report(cfg, runs, failed)
    if failures is not None:
        failures.update(failed)
    return results


def grid(spec: str, cfg: BenchConfig) -> list[tuple[float, float | None]]:
    """The ``(lr factor, momentum)`` runs of a row: every factor; the stock rows at every
    momentum of ``cfg.momenta`` too; the adaptive row (``auto``) only as the user would run
    it, at the rule's one-batch rate (it chooses its own step).

    >>> from tf_hetero.tools.benchconfig import BenchConfig
    >>> cfg = BenchConfig(strategies=("auto", "hps"), lr_factors=(1, 2), momenta=(0.9, 0.0))
    >>> grid("pss", cfg), grid("hps", cfg), grid("auto", cfg)
    ([(1.0, 0.9), (1.0, 0.0), (2.0, 0.9), (2.0, 0.0)], [(1.0, None), (2.0, None)], [(1.0, None)])
    """
    base = split_row(spec)[0]
    if registry.parse(base)[0] == "auto":
        return [(1.0, None)]
    momenta = cfg.momenta if base == "pss" and cfg.momenta else (None,)
    return [(f, m) for f in cfg.lr_factors for m in momenta]


def _run_repeats(cluster, cfg: BenchConfig, profile: Profile, meter,
                 cpu_meter) -> tuple[list[dict], dict]:
    """Every row at every learning-rate factor, ``cfg.repeats`` times: ``(runs, {strategy:
    error} of the rows that raised)``."""
    runs, failed = [], {}
    for rep in range(cfg.repeats):
        # A shuffled order per repeat: no row always runs first on a fresh cluster, or
        # always after the same neighbour.
        order = list(cfg.strategies)
        random.Random(cfg.seed + rep).shuffle(order)
        print(f"[tf-hetero bench] repeat {rep + 1}/{cfg.repeats}: {', '.join(order)}",
              flush=True)
        for spec in order:
            for factor, momentum in grid(spec, cfg):
                # Free the previous run's strategy, model and remote resources now,
                # outside the timed region: collected during the next fit they stalled
                # it (+26 s).
                t = time.perf_counter()
                gc.collect()
                if time.perf_counter() - t > 1.0:
                    print(f"[tf-hetero bench] cleanup took {time.perf_counter() - t:.1f}s",
                          flush=True)
                try:
                    # Every row of a repeat starts from the same seed (paired); the
                    # repeats differ, so their range covers the seed's luck too (one
                    # seed: BSP's final accuracy was the same to 4 digits in 3 runs).
                    run = run_strategy(spec, cluster, cfg, profile, factor, meter,
                                       seed=cfg.seed + rep, cpu_meter=cpu_meter,
                                       momentum=momentum)
                except Exception as e:  # pylint: disable=broad-except
                    # One broken row must not lose the others' measurements.
                    failed.setdefault(spec, failure_line(e))
                    print(f"[tf-hetero bench] {spec} failed: {failed[spec]}", flush=True)
                    continue
                run["repeat"] = rep
                runs.append(run)
    return runs, failed


def failure_line(error: Exception) -> str:
    """A failed row's one line in the report: the error's type and its last line.

    >>> failure_line(RuntimeError("Traceback...\\nEngineError: no task finished in 600 s"))
    'RuntimeError: EngineError: no task finished in 600 s'
    """
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[-1] if text else ''}"


def _write_report(cfg: BenchConfig, runs: list[dict], failed: dict) -> list[dict]:
    """Prints the table and writes the JSON, Markdown and PNG; returns the table's rows."""
    done = [s for s in cfg.strategies if any(r["strategy"] == s for r in runs)]
    results = report.summarize(runs, done, runs[0]["num_classes"])
    # The ideal of the run each row reports (the profile integrated over its tasks).
    ideal = statistics.median(r["ideal_samples_per_sec"] for r in results)
    table = report.format_table(results, cfg, ideal)
    paired = report.paired_table(runs, done)
    if paired:
        table += "\n\n" + paired
    if failed:
        table += "\n\nRows that failed (not in the table):\n\n" + "\n".join(
            f"- {spec}: {why}" for spec, why in failed.items())
    print("\n" + table + "\n", flush=True)
    stem = os.path.splitext(cfg.json_path)[0] if cfg.json_path else os.path.join(cfg.out_dir, "bench")
    report.write(stem, {"config": dataclasses.asdict(cfg), "ideal_samples_per_sec": ideal,
                        "results": results, "runs": runs, "failed": failed}, table,
                 lambda path: report.plot_runs(results, cfg, path))
    print(f"[tf-hetero bench] wrote {stem}.json, .md and .png", flush=True)
    return results
