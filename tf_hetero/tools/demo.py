"""``tf-hetero demo``: one heterogeneous local cluster, ``model.fit``, and what happened.

Starts a multi-process :class:`~tf_hetero.cluster.LocalCluster` (4 workers, 2 PS, worker 3
four times slower by default), trains a reference model on the offline digits data with
``model.fit`` under the chosen strategy, and prints per-worker task counts and times (with the
measured slowdown ratio next to the configured one), samples/s, cluster efficiency and test
accuracy. Writes ``demo.png`` (task timeline, tasks per worker) and ``demo.json``.

>>> from tf_hetero.tools.demo import DemoConfig, run_demo                   # doctest: +SKIP
>>> result = run_demo(DemoConfig(epochs=1, steps_per_epoch=20))
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np

from tf_hetero.telemetry import perf as metrics
from tf_hetero.emulation.profile import Profile
from tf_hetero.telemetry.tasklog import TaskLog, measured_ratios

__all__ = ["DemoConfig", "DemoResult", "run_demo", "train", "measure", "format_report", "plot"]



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

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


def train(cfg: DemoConfig, resolver, profile: Profile) -> DemoResult:
    """Trains once under ``cfg.strategy`` on the cluster behind ``resolver``; measures it."""
    import tf_keras as keras

    import tf_hetero
    from tf_hetero import data, models

    from tf_hetero.strategies import registry

    train_split = data.load(cfg.dataset, "train")
    test_split = data.load(cfg.dataset, "test")
    strategy = registry.make(cfg.strategy, resolver)
    n = strategy.extended._num_workers  # pylint: disable=protected-access
    with strategy.scope():
        model = models.build(cfg.model, input_shape=train_split.input_shape,
                             num_classes=train_split.num_classes, seed=cfg.seed)
        model.compile(optimizer=keras.optimizers.Adam(cfg.learning_rate),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    tf_hetero.emulate(model, profile, strategy=strategy)
    hetero = isinstance(strategy, tf_hetero.HeteroStrategy)
    task_log = TaskLog.for_strategy(strategy)  # progress; for tf-hetero strategies the
    # figures below come from the monitor, which knows which tasks were applied
    train_fn = data.dataset_fn(batch_size=cfg.batch_size, num_workers=n, seed=cfg.seed,
                               data=train_split)
    t0 = time.perf_counter()
    model.fit(keras.utils.experimental.DatasetCreator(train_fn), epochs=cfg.epochs,
              steps_per_epoch=cfg.steps_per_epoch, verbose=0,
              callbacks=[tf_hetero.Progress(cfg.progress_interval_s, task_log=task_log)])
    fit_wall = time.perf_counter() - t0
    task_log.detach()
    if hetero:
        task_log = TaskLog.from_records(strategy.monitor.tasks)

    logits = model(test_split.x, training=False).numpy()
    accuracy = float(np.mean(np.argmax(logits, axis=1) == test_split.y))
    applied = strategy.monitor.summary()["applied_tasks"] if hetero else None
    return measure(task_log, profile, n, cfg.batch_size, fit_wall_s=fit_wall, accuracy=accuracy,
                   strategy=cfg.strategy, config=dataclasses.asdict(cfg), applied_tasks=applied)


def measure(task_log: TaskLog, profile: Profile, num_workers: int, batch_size: int, *,
            fit_wall_s: float, accuracy: float, strategy: str, config: dict,
            applied_tasks: int | None = None) -> DemoResult:
    """Turns a finished fit's task log into per-worker figures and cluster efficiency.

    ``config`` is reported as given; :func:`format_report` and :func:`plot` read its
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


def format_report(r: DemoResult) -> str:
    """The per-worker table and the cluster summary as Markdown."""
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


def plot(r: DemoResult, path: str) -> str:
    """Writes the task timeline and tasks-per-worker chart to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(r.tasks)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [3, 1]})
    colors = plt.get_cmap("tab10")
    for w, start, end in r.timeline:
        ax1.barh(w, end - start, left=start, height=0.7, color=colors(w % 10),
                 edgecolor="white", linewidth=0.3)
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


def run_demo(cfg: DemoConfig | None = None) -> DemoResult:
    """Starts the local cluster, trains, prints the report, writes the PNG and JSON."""
    from tf_hetero.cluster import LocalCluster

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
    report = format_report(result)
    print("\n" + report + "\n", flush=True)
    png = plot(result, os.path.join(cfg.out_dir, "demo.png"))
    with open(os.path.join(cfg.out_dir, "demo.json"), "w") as f:
        f.write(result.to_json())
    with open(os.path.join(cfg.out_dir, "demo.md"), "w") as f:
        f.write(report + "\n")
    print(f"[tf-hetero] wrote {png}, demo.json and demo.md in {cfg.out_dir}", flush=True)
    return result
