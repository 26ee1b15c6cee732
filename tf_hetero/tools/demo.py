"""``tf-hetero demo``: stock PSS and tf-hetero strategies on one heterogeneous local cluster.

``make demo`` (``tf-hetero demo``) starts one multi-process
:class:`~tf_hetero.cluster.local.LocalCluster` (4 workers, 2 PS, worker 3 four times slower by
default) and trains the same model on the same data, with the same sample budget and the same
learning-rate rule, under stock ``tf.distribute.ParameterServerStrategy`` and the tf-hetero
strategies in :data:`COMPARE_STRATEGIES`, one after the other, with the benchmark's
machinery (:mod:`tf_hetero.tools.benchconfig`'s defaults, :mod:`tf_hetero.tools.benchrow`'s
clock and measured bytes). It prints one table, every figure relative to stock PSS
(:func:`tf_hetero.tools.report.compare_table`), and writes one figure: accuracy vs wall time
per strategy and each strategy's per-worker task timeline, whose gaps are where a worker
waited (``compare.png``, with ``compare.json`` and ``compare.md``).

``tf-hetero demo --strategy X`` shows one strategy in detail instead (:func:`run_demo`):
per-worker task counts and times (measured slowdown next to the configured one), samples/s,
cluster efficiency and test accuracy (:func:`tf_hetero.tools.report.worker_table`),
``demo.png`` (task timeline, tasks per worker) and ``demo.json``.

>>> from tf_hetero.tools.demo import DemoConfig, run_demo                   # doctest: +SKIP
>>> result = run_demo(DemoConfig(epochs=1, steps_per_epoch=20))
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import random
import time

import numpy as np

from tf_hetero import tfcompat
from tf_hetero.emulation.profile import Profile
from tf_hetero.telemetry import perf as metrics
from tf_hetero.telemetry.tasklog import TaskLog, measured_ratios
from tf_hetero.tools import report

__all__ = ["DemoConfig", "DemoResult", "run_demo", "train", "measure", "COMPARE_STRATEGIES",
           "compare_config", "run_comparison"]

#: The rows of ``make demo``: stock PSS (the reference), the adaptive strategy (given the
#: same one-batch rate as stock PSS), the two tf-hetero strategies that reach the target
#: soonest in the scenario suite (benchmarks/results/), and plain BSP.
COMPARE_STRATEGIES = ("pss", "auto", "hps", "epsp", "bsp")


@dataclasses.dataclass
class DemoConfig:
    workers: int = 4
    ps: int = 2
    profile: str = "slow=3:4"
    strategy: str = "pss"
    model: str = "mlp"
    dataset: str = "digits"
    batch_size: int = 32
    epochs: int = 4
    steps_per_epoch: int = 100
    learning_rate: float = 1e-3
    out_dir: str = "runs/demo"
    processes: bool = True
    progress_interval_s: float = 2.0
    seed: int = 0

    def __post_init__(self):
        from tf_hetero.strategies import registry

        registry.parse(self.strategy)  # a clear error for an unknown name
        for name in ("workers", "ps", "batch_size", "epochs", "steps_per_epoch"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"DemoConfig.{name}={value!r}: need an integer >= 1.")
        if not self.learning_rate > 0:
            raise ValueError(f"DemoConfig.learning_rate={self.learning_rate!r}: need > 0.")
        Profile.parse(self.profile).check_workers(self.workers)


@dataclasses.dataclass
class DemoResult:
    config: dict
    strategy: str
    slowdowns: list  # configured expected factor per worker
    classes: list
    tasks: list
    mean_ms: list
    median_ms: list
    measured_ratio: list
    samples: int
    fit_wall_s: float
    task_span_s: float
    samples_per_sec: float
    ideal_samples_per_sec: float
    efficiency: float
    accuracy: float
    timeline: list  # (worker, start_s, end_s) per task, relative to the first task
    #: Emulated ms each worker's tasks were given, on average (from the workers' counters:
    #: what the profile asked, whatever the machine's load did); None without emulation.
    emulated_ms_per_task: list | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


def train(cfg: DemoConfig, resolver, profile: Profile) -> DemoResult:
    """Trains once under ``cfg.strategy`` on the cluster behind ``resolver``; measures it."""
    import tf_keras as keras

    from tf_hetero import data, models
    from tf_hetero.callbacks import Progress
    from tf_hetero.emulation.device import emulate
    from tf_hetero.strategies import registry
    from tf_hetero.strategies.base import HeteroStrategy

    train_split = data.load(cfg.dataset, "train")
    test_split = data.load(cfg.dataset, "test")
    data.device_datasets_without_autotune()  # stock PSS too, as in the bench
    strategy = registry.make(cfg.strategy, resolver)
    n = tfcompat.strategy.num_workers(strategy)
    with strategy.scope():
        model = models.build(cfg.model, input_shape=train_split.input_shape,
                             num_classes=train_split.num_classes, seed=cfg.seed)
        model.compile(optimizer=keras.optimizers.Adam(cfg.learning_rate),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    device = emulate(model, profile, strategy=strategy)
    hetero = isinstance(strategy, HeteroStrategy)
    task_log = TaskLog.for_strategy(strategy)  # progress; for tf-hetero strategies the
    # figures below come from the monitor, which knows which tasks were applied
    train_fn = data.dataset_fn(batch_size=cfg.batch_size, num_workers=n, seed=cfg.seed,
                               data=train_split, per_worker="reshuffle")  # as the bench
    t0 = time.perf_counter()
    model.fit(keras.utils.experimental.DatasetCreator(train_fn), epochs=cfg.epochs,
              steps_per_epoch=cfg.steps_per_epoch, verbose=0,
              callbacks=[Progress(cfg.progress_interval_s, task_log=task_log)])
    fit_wall = time.perf_counter() - t0
    task_log.detach()
    if hetero:
        task_log = TaskLog.from_records(strategy.monitor.tasks)

    logits = model(test_split.x, training=False).numpy()
    accuracy = float(np.mean(np.argmax(logits, axis=1) == test_split.y))
    applied = strategy.monitor.summary()["applied_tasks"] if hetero else None
    result = measure(task_log, profile, n, cfg.batch_size, fit_wall_s=fit_wall,
                     accuracy=accuracy, strategy=cfg.strategy, config=dataclasses.asdict(cfg),
                     applied_tasks=applied)
    result.emulated_ms_per_task = device.budget_ms_per_task()
    return result


def measure(task_log: TaskLog, profile: Profile, num_workers: int, batch_size: int, *,
            fit_wall_s: float, accuracy: float, strategy: str, config: dict,
            applied_tasks: int | None = None) -> DemoResult:
    """Turns a finished fit's task log into per-worker figures and cluster efficiency.

    ``config`` is reported as given; :func:`~tf_hetero.tools.report.worker_table` and
    :func:`~tf_hetero.tools.report.plot_workers` read its
    ``profile``, ``model``, ``dataset`` and ``batch_size`` entries. ``applied_tasks`` (default:
    every task) is what counts toward samples/s: dropped tasks (backup workers) do not.
    """
    # Each worker's first task also traces and registers the function: leave it out of the
    # per-task times, keep it in counts and throughput.
    stats = task_log.stats(num_workers, skip_first=1)
    tasks = [s.count for s in stats]
    samples = (sum(tasks) if applied_tasks is None else applied_tasks) * batch_size
    span = task_log.span()
    expected = profile.expected_slowdowns(num_workers)
    ideal = metrics.ideal_samples_per_sec(batch_size, profile.base_ms, expected)
    t_first = min(r.start for r in task_log.records)
    return DemoResult(
        config=config, strategy=strategy, slowdowns=list(expected),
        classes=list(profile.class_names(num_workers)), tasks=tasks,
        mean_ms=[1e3 * s.mean_s for s in stats], median_ms=[1e3 * s.median_s for s in stats],
        measured_ratio=measured_ratios(stats), samples=samples, fit_wall_s=fit_wall_s,
        task_span_s=span, samples_per_sec=samples / span, ideal_samples_per_sec=ideal,
        efficiency=metrics.efficiency(samples / span, ideal), accuracy=accuracy,
        timeline=[(r.worker, r.start - t_first, r.end - t_first) for r in task_log.records])


def run_demo(cfg: DemoConfig | None = None) -> DemoResult:
    """Starts the local cluster, trains, prints the report, writes the PNG and JSON."""
    from tf_hetero.cluster.local import LocalCluster

    cfg = cfg or DemoConfig()
    profile = Profile.parse(cfg.profile)
    os.makedirs(cfg.out_dir, exist_ok=True)
    mode = "processes" if cfg.processes else "in-process servers"
    print(f"[tf-hetero] starting a local cluster: {cfg.workers} workers, {cfg.ps} PS ({mode}), "
          f"profile {profile.spec()}", flush=True)
    t0 = time.perf_counter()
    with LocalCluster(cfg.workers, cfg.ps, profile=profile, processes=cfg.processes) as cluster:
        print(f"[tf-hetero] cluster up in {time.perf_counter() - t0:.1f}s; training "
              f"{cfg.epochs} x {cfg.steps_per_epoch} tasks of {cfg.batch_size} samples "
              f"under {cfg.strategy}", flush=True)
        result = train(cfg, cluster.resolver, profile)
    table = report.worker_table(result)
    print("\n" + table + "\n", flush=True)
    stem = os.path.join(cfg.out_dir, "demo")
    report.write(stem, dataclasses.asdict(result), table,
                 lambda path: report.plot_workers(result, path))
    print(f"[tf-hetero] wrote {stem}.png, demo.json and demo.md in {cfg.out_dir}", flush=True)
    return result


# --------------------------------------------------------------------- the comparison


def compare_config(strategies=COMPARE_STRATEGIES, **settings):
    """The benchmark's configuration (:class:`~tf_hetero.tools.benchconfig.BenchConfig`: its
    defaults, so its data, sample budget and learning-rate rule) for the demo's rows;
    ``settings`` override BenchConfig fields (``out_dir`` defaults to ``runs/demo``)."""
    from tf_hetero.tools.benchconfig import BenchConfig

    settings.setdefault("out_dir", "runs/demo")
    return BenchConfig(strategies=tuple(strategies), **settings)


def run_comparison(cfg=None) -> list[dict]:
    """Runs every strategy of ``cfg`` (a BenchConfig, default :func:`compare_config`) once on
    one local cluster, in the benchmark's shuffled order, prints
    :func:`~tf_hetero.tools.report.compare_table` and writes ``compare.png``,
    ``compare.json`` and ``compare.md`` in ``cfg.out_dir``."""
    from tf_hetero.cluster.local import LocalCluster
    from tf_hetero.telemetry.traffic import TrafficMeter
    from tf_hetero.tools.benchrow import run_strategy

    cfg = cfg or compare_config()
    profile = Profile.parse(cfg.profile)
    os.makedirs(cfg.out_dir, exist_ok=True)
    # The bench's first-repeat order: no strategy is always first on a fresh cluster.
    order = list(cfg.strategies)
    random.Random(cfg.seed).shuffle(order)
    t_start = time.perf_counter()
    print(f"[tf-hetero demo] {len(order)} strategies, one after the other, on one local cluster "
          f"({cfg.workers} workers / {cfg.ps} PS, profile {profile.spec()}): {', '.join(order)}. "
          f"Each trains {cfg.model} on {cfg.dataset} for {cfg.tasks} x {cfg.batch_size} samples.",
          flush=True)
    runs = []
    with LocalCluster(cfg.workers, cfg.ps, profile=profile, processes=True) as cluster:
        print(f"[tf-hetero demo] cluster up in {time.perf_counter() - t_start:.0f}s", flush=True)
        meter = TrafficMeter.for_cluster(cluster)
        for i, spec in enumerate(order, 1):
            print(f"[tf-hetero demo] {i}/{len(order)}: {spec} "
                  f"({time.perf_counter() - t_start:.0f}s elapsed)", flush=True)
            gc.collect()  # the previous row's objects, outside the timed region (as the bench)
            run = run_strategy(spec, cluster, cfg, profile, 1.0, meter)
            t = run["time_to_target_s"]
            print(f"[tf-hetero demo] {spec}: accuracy {cfg.target_accuracy} "
                  f"{f'after {t:.1f}s' if t is not None else 'not reached'}, final "
                  f"{run['final_accuracy']:.3f}, {run['samples_per_sec']:.0f} samples/s",
                  flush=True)
            runs.append(run)
    results = report.summarize(runs, cfg.strategies, runs[0]["num_classes"])
    table = report.compare_table(results, cfg)
    print("\n" + table + "\n", flush=True)
    stem = os.path.join(cfg.out_dir, "compare")
    report.write(stem, {"config": dataclasses.asdict(cfg), "results": results}, table,
                 lambda path: report.plot_runs(results, cfg, path))
    print(f"[tf-hetero demo] wrote {stem}.png, compare.json and compare.md in {cfg.out_dir} "
          f"({time.perf_counter() - t_start:.0f}s in all)", flush=True)
    return results
