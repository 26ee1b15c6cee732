"""``tf-hetero bench``: strategies side by side on one heterogeneous local cluster.

    tf-hetero bench --strategies pss,bsp,backup,ssp --workers 4 --ps 2 --profile slow=3:4 \\
        --json runs/bench/bench.json

One invocation starts one multi-process :class:`~tf_hetero.cluster.LocalCluster` and trains
the same model on the same data with the same sample budget under each strategy in turn
(this process is the chief). The learning-rate rule is the same for all: SGD with momentum,
``lr = base_lr x micro-batches per update`` (linear scaling: N for BSP, N-b for backup
workers, 1 for the asynchronous strategies). The stock ``tf.distribute.ParameterServerStrategy``
(``pss``) is always included as the reference row, and the ideal (sum of the workers'
capacities) as the last row.

Every row runs on one clock, from ``fit()`` being called to the last update applied (the final
apply, a pipelined drain round or a fold-only round included); ``setup_s`` reports the part
before the first task started. Before the timed runs, every row runs one short untimed fit
(:func:`warm_up`: the process's start-up is no row's). ``--repeats K`` runs every row K times,
each repeat in an order shuffled from the seed, and reports the median and range
(docs/MEASUREMENT.md).

Per strategy (JSON keys of ``results``, one row per strategy: the run with the median
samples/s, with ``spread``; every run is in ``runs``):

- ``samples_per_sec``: applied samples / span; dropped tasks (backup workers) do not count;
- ``efficiency``: ``samples_per_sec`` / the ideal of that run, the workers' capacities
  integrated over the tasks they ran (:func:`tf_hetero.telemetry.perf.ideal_over_tasks`);
- ``time_to_target_s``: seconds from ``fit()`` until the held-out accuracy, sampled every
  ``eval_interval_s`` from the chief while training runs, first reaches the target (``null``
  if never; ``eval_failures`` counts samples whose evaluation raised);
- ``final_accuracy``, ``rounds`` (applied updates), staleness;
- ``bytes_to_ps_per_sample`` / ``bytes_from_ps_per_sample``: bytes measured on the TCP
  connections between the worker and PS processes over the row's fit (pushes and requests /
  variable reads), per sample computed, the same way for every row; ``ps_bytes`` per PS and
  ``ps_load_max_over_mean`` (:mod:`tf_hetero.telemetry.traffic`; where it cannot measure,
  the same figure of ``ps_step_bytes``);
- ``cpu_s_per_1000_samples`` (chief, worker, ps, total): CPU seconds the processes spent
  over the row's fit per 1000 samples computed, and ``machine_busy``, the busy share of all
  cores (:mod:`tf_hetero.telemetry.cpu`; process-mode clusters on Linux);
- per-PS load (:mod:`tf_hetero.telemetry.psload`): ``ps_step_bytes`` (bytes one step reads
  from and pushes to each PS, from where the variables are) and
  ``ps_placement_max_over_mean``; with emulated PS tasks (profile ``ps_mbps``), measured on
  them over the row's fit: ``ps_served_bytes``, ``ps_busy_s`` (service), ``ps_wait_s``
  (requests queued for a busy PS), ``ps_busy_max_over_mean``.

A row ``NAME@balanced`` (e.g. ``bsp@balanced``) builds strategy ``NAME`` with
``placement="balanced"``, its PS service rates taken from the profile
(:mod:`tf_hetero.policies.placement`); ``NAME`` alone keeps TensorFlow's round-robin placement. A
``+rebalance`` suffix (``bsp+rebalance``, ``bsp@balanced+rebalance``) turns on live
rebalancing (:mod:`tf_hetero.policies.rebalance`, default controller); the row reports its
moves (``rebalance_moves``: decision, variable, from PS, to PS, seconds) and the mean round
time before the first and after the last kept move (``rebalance_round_ms``).

Timings are measured, not asserted: compare rows of one run, as ratios.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import random
import statistics
import threading
import time

import numpy as np

from tf_hetero.emulation.profile import Profile
from tf_hetero.policies import lr as lr_rule
from tf_hetero.telemetry import perf as metrics

__all__ = ["BenchConfig", "run_bench", "format_table", "paired_table"]

#: Strategies and models of the rows already measured (see run_strategy).
_FINISHED_ROWS: list = []


@dataclasses.dataclass
class BenchConfig:
    strategies: tuple = ("pss", "asp", "bsp", "backup", "ssp")
    workers: int = 4
    ps: int = 2
    profile: str = "slow=3:4"
    model: str = "mlp"
    dataset: str = "digits"
    batch_size: int = 32
    tasks: int = 400  # sample budget, in micro-batches of batch_size
    steps_per_epoch: int = 100
    #: Micro-batches per scheduled closure (Keras steps_per_execution): amortizes the ~10-20 ms
    #: a closure costs to launch; the closure is then the engine's task.
    steps_per_execution: int = 1
    base_lr: float = 0.02
    momentum: float = 0.9
    target_accuracy: float = 0.9
    eval_interval_s: float = 0.5
    out_dir: str = "runs/bench"
    json_path: str | None = None
    seed: int = 0
    #: Runs per strategy; every repeat runs all rows in an order shuffled from ``seed``,
    #: each from seed ``seed + repeat`` (model initialisation and data order).
    repeats: int = 1
    #: Learning rates tried per strategy, as factors of the linear rule; the table reports
    #: each strategy at its best (``--lr-grid``: 0.5, 1, 2).
    lr_factors: tuple = (1.0,)
    #: Updates over which the learning rate ramps up linearly (Goyal et al.) for strategies
    #: whose update averages more than one micro-batch; 0: none; ``None`` (the default): as
    #: many updates as one update averages micro-batches
    #: (:func:`tf_hetero.policies.lr.warmup_updates`).
    warmup_updates: int | None = None
    #: How the workers divide the training set (:func:`tf_hetero.data.dataset_fn`'s
    #: ``per_worker``): "reshuffle" (each all of it, in its own order: unbiased whichever
    #: worker reads more) or "shard" (each its own 1/N: only BSP-like rows read it evenly).
    data_per_worker: str = "reshuffle"

    def __post_init__(self):
        from tf_hetero.strategies import registry

        names = [s.strip() for s in self.strategies if s.strip()]
        for s in names:
            registry.parse(split_row(s)[0])  # raises a clear error for unknown names
        if "pss" not in names:
            names.insert(0, "pss")  # the reference row
        self.strategies = tuple(dict.fromkeys(names))
        for name in ("workers", "ps", "batch_size", "tasks", "steps_per_epoch",
                     "steps_per_execution", "repeats"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"bench {name}={v!r}: need an integer >= 1.")
        if self.steps_per_epoch % self.steps_per_execution:
            raise ValueError(f"bench steps_per_epoch={self.steps_per_epoch} must be a multiple of "
                             f"steps_per_execution={self.steps_per_execution}.")
        for s, per_round in sized_rounds(self):  # checked before any cluster starts
            if self.steps_per_epoch % per_round:
                raise ValueError(
                    f"bench {s}: steps_per_epoch={self.steps_per_epoch} is not a multiple of "
                    f"its {per_round} batches per round (an epoch would end in a partial round, "
                    "sized differently). Fix: choose steps_per_epoch accordingly.")
        if self.tasks % self.steps_per_epoch:
            raise ValueError(f"bench tasks={self.tasks} must be a multiple of "
                             f"steps_per_epoch={self.steps_per_epoch}.")
        from tf_hetero.data import PER_WORKER

        if self.data_per_worker not in PER_WORKER:
            raise ValueError(f"bench data_per_worker={self.data_per_worker!r}: use one of "
                             f"{', '.join(PER_WORKER)}.")
        self.lr_factors = tuple(float(f) for f in self.lr_factors)
        if not self.lr_factors or not all(f > 0 for f in self.lr_factors):
            raise ValueError(f"lr_factors={self.lr_factors!r}: need factors > 0.")
        if self.warmup_updates is not None and (not isinstance(self.warmup_updates, int)
                                                or self.warmup_updates < 0):
            raise ValueError(f"warmup_updates={self.warmup_updates!r}: need an integer >= 0, "
                             "or None (as many updates as an update averages micro-batches).")
        if not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy={self.target_accuracy!r}: need 0 < t <= 1.")
        Profile.parse(self.profile).check_workers(self.workers)
        Profile.parse(self.profile).check_ps(self.ps)


class _AccuracySampler:
    """Evaluates held-out accuracy from the chief every ``interval`` s while fit runs."""

    def __init__(self, model, x, y, interval: float):
        self.model, self.x, self.y, self.interval = model, x, y, interval
        self.samples: list[tuple[float, float]] = []
        self.failures: list[str] = []  # evaluations that raised (reported, never hidden)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tf-hetero-eval")

    def accuracy(self) -> float:
        logits = self.model(self.x, training=False).numpy()
        return float(np.mean(np.argmax(logits, axis=1) == self.y))

    def start(self, t0: float):
        self.t0 = t0
        self._thread.start()

    def _loop(self):
        while not self._stop.wait(self.interval):
            try:
                acc = self.accuracy()
            except Exception as e:  # pylint: disable=broad-except
                self.failures.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                continue
            self.samples.append((time.perf_counter() - self.t0, acc))

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=30)


def split_row(spec: str) -> tuple[str, str | None, bool]:
    """``NAME[@PLACEMENT][+rebalance][#COPY]`` -> ``(NAME, PLACEMENT or None, rebalance)``.

    ``#COPY`` (a number) makes another row of the same settings: ``hps,hps#2`` runs H-PS
    twice side by side, a control row whose spread says how large a difference between
    rows of one run is noise (docs/MEASUREMENT.md).

    >>> split_row("hps8@balanced"), split_row("pss"), split_row("bsp+rebalance")
    (('hps8', 'balanced', False), ('pss', None, False), ('bsp', None, True))
    >>> split_row("hps#2"), split_row("bsp@balanced+rebalance#3")
    (('hps', None, False), ('bsp', 'balanced', True))
    >>> split_row("bsp+fast")
    Traceback (most recent call last):
    ...
    ValueError: bench row 'bsp+fast': suffix '+fast' is unknown. Fix: NAME+rebalance or NAME@balanced+rebalance.
    >>> split_row("hps#b")
    Traceback (most recent call last):
    ...
    ValueError: bench row 'hps#b': copy 'b' is not a number. Fix: NAME#2 for a second row of NAME.
    """
    from tf_hetero.policies.placement import PLACEMENTS

    settings, hash_, copy = spec.partition("#")
    if hash_ and not copy.isdigit():
        raise ValueError(f"bench row {spec!r}: copy {copy!r} is not a number. Fix: NAME#2 for "
                         "a second row of NAME.")
    head, plus, suffix = settings.partition("+")
    if plus and suffix != "rebalance":
        raise ValueError(f"bench row {spec!r}: suffix '+{suffix}' is unknown. Fix: "
                         "NAME+rebalance or NAME@balanced+rebalance.")
    base, sep, placement = head.partition("@")
    if sep and placement not in PLACEMENTS:
        raise ValueError(f"bench row {spec!r}: placement {placement!r} is unknown. Fix: "
                         f"NAME@balanced or NAME@round_robin ({', '.join(PLACEMENTS)}).")
    if base == "pss" and (sep or plus):
        raise ValueError(f"bench row {spec!r}: the stock ParameterServerStrategy places "
                         "variables round-robin only and never moves them. Fix: use a "
                         "tf-hetero strategy, e.g. asp@balanced or bsp+rebalance.")
    return base, (placement if sep else None), bool(plus)


def rebalance_figures(rebalancer, rounds) -> dict:
    """The moves a row's rebalancer made and the mean training round time (ms) before its
    first move and after its last one, leaving out the first round after each move, which
    also traces the step again (``None`` where there is no such round)."""
    moves = [list(m) for m in rebalancer.moves]
    times = [(r.t_open, (r.t_applied - r.t_open) * 1e3) for r in rounds if r.training]
    marks = rebalancer.move_times

    def mean(xs):
        return statistics.fmean(xs) if xs else None

    before = mean([ms for t, ms in times if not marks or t < marks[0]])
    after = mean([ms for t, ms in times if marks and t > marks[-1]][1:])
    return {"rebalance_moves": moves, "rebalance_round_ms": [before, after],
            **rebalancer.controller.summary()}


def _task_records(strategy, task_log):
    """The :class:`~tf_hetero.telemetry.TaskRecord` of every training task of the run: from
    the task log for stock PSS (all applied), from the monitor for tf-hetero strategies."""
    return task_log.records if task_log is not None else list(strategy.monitor.tasks)


def learning_rate(cfg: BenchConfig, per_update: int, factor: float = 1.0):
    """The SGD learning rate of a row as tf_keras takes it: the linear rule
    (:func:`~tf_hetero.policies.lr.linear_rate`), ramped up linearly over
    :func:`~tf_hetero.policies.lr.warmup_updates` updates when an update averages several
    micro-batches (:func:`~tf_hetero.policies.lr.warmup_schedule`, in TensorFlow ops).

    >>> learning_rate(BenchConfig(strategies=("bsp",), warmup_updates=0), 4)
    0.08
    >>> lr = learning_rate(BenchConfig(strategies=("bsp",)), 4)   # warm-up over 4 updates
    >>> [round(float(lr(step)), 3) for step in (0, 1, 3, 10)]
    [0.02, 0.04, 0.08, 0.08]
    """
    peak = lr_rule.linear_rate(cfg.base_lr, per_update, factor)
    ramp_updates = lr_rule.warmup_updates(cfg.warmup_updates, per_update)
    if ramp_updates <= 1:
        return peak
    import tf_keras as keras

    class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            import tensorflow as tf

            ramp = tf.cast(step + 1, tf.float32) / float(ramp_updates)
            return peak * tf.minimum(1.0, ramp)

        def get_config(self):
            return {"peak": peak, "warmup_updates": ramp_updates}

    return WarmUp()


def _end_row(strategy, model, task_logs) -> None:
    """Nothing of a row may run beside the next one: its task logs, worker threads and engine
    ticker stop here (docs/MEASUREMENT.md), whether its fit finished or raised."""
    from tf_hetero.strategies.runtime.coordinator import shutdown

    for log in {id(x): x for x in task_logs if x is not None}.values():
        log.detach()
    shutdown(strategy)
    # Stopped, but kept referenced until the process exits: collecting a finished row's
    # functions makes TF remove them from every server with blocking RPCs (measured: 60 s
    # before an MNIST-1D row) and, once the cluster has stopped, log a "Failed to remove
    # function remotely" error for each (252 lines at the end of a 3-row bench).
    _FINISHED_ROWS.append((strategy, model))


def run_strategy(spec: str, cluster, cfg: BenchConfig, profile: Profile,
                 lr_factor: float = 1.0, meter=None, seed: int | None = None,
                 cpu_meter=None) -> dict:
    """Trains once under ``spec`` at ``lr_factor`` x the linear rule and measures it, from
    ``seed`` (model initialisation and data order; default ``cfg.seed``)."""
    seed = cfg.seed if seed is None else seed
    import tf_keras as keras

    import tf_hetero
    from tf_hetero import data, models
    from tf_hetero.strategies import registry
    from tf_hetero.telemetry.tasklog import TaskLog

    from tf_hetero.emulation.ps import bytes_per_ps
    from tf_hetero.policies.placement import Balanced, max_over_mean
    from tf_hetero.telemetry import psload

    train, test = data.load(cfg.dataset, "train"), data.load(cfg.dataset, "test")
    base, placement, rebalance = split_row(spec)
    # Stock PSS rows too (tf-hetero strategies install it themselves): the same input path
    # for every row, and rows kept alive to the end do not hold up the cluster's close.
    data.device_datasets_without_autotune()
    strategy = registry.make(base, cluster.resolver)
    if placement is not None:  # before any variable exists; rates from the row's profile
        strategy.extended.set_placement(
            Balanced(profile=profile) if placement == "balanced" else placement,
            strategy.monitor)
    if rebalance:
        strategy.set_rebalance(True)  # refuses a strategy without rounds, with the fix
    k = cfg.steps_per_execution
    per_update = registry.updates_per_round(base, cfg.workers) * k
    # The same sample budget for every row: a Keras step reads one dataset batch (a sized
    # round covers its global batch's steps however its workers split it).
    steps_per_epoch = cfg.steps_per_epoch
    granule = getattr(getattr(strategy, "config", None), "granule", None)
    with strategy.scope():
        model = models.build(cfg.model, input_shape=train.input_shape,
                             num_classes=train.num_classes, seed=seed)
        model.compile(keras.optimizers.SGD(learning_rate(cfg, per_update, lr_factor),
                                           momentum=cfg.momentum),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=k)
    # base_ms is one dataset batch's time for every row; a sized task's step (H-PS) takes
    # it in proportion to the samples it reads.
    device = tf_hetero.emulate(model, profile, strategy=strategy, batch_size=cfg.batch_size)
    servers = device.servers  # emulated PS tasks (profile ps_mbps), or None
    stock = not isinstance(strategy, tf_hetero.HeteroStrategy)
    task_log = TaskLog.for_strategy(strategy) if stock else None
    sampler = _AccuracySampler(model, test.x, test.y, cfg.eval_interval_s)
    train_fn = data.dataset_fn(batch_size=cfg.batch_size, num_workers=cfg.workers,
                               seed=seed, data=train, per_worker=cfg.data_per_worker)
    peak_lr = lr_rule.linear_rate(cfg.base_lr, per_update, lr_factor)
    ramp = lr_rule.warmup_updates(cfg.warmup_updates, per_update)
    print(f"[tf-hetero bench] {spec}: {cfg.tasks} tasks of {cfg.batch_size} samples, "
          f"lr {peak_lr:g}{f' (warm-up {ramp} updates)' if ramp > 1 else ''}", flush=True)
    traffic_before = meter.snapshot() if meter is not None else None
    cpu_before = cpu_meter.snapshot() if cpu_meter is not None else None
    served_before = servers.totals() if servers is not None else None
    t0 = time.perf_counter()
    sampler.start(t0)
    progress = tf_hetero.Progress(5.0, task_log=task_log or TaskLog.for_strategy(strategy))
    stopped = None  # the divergence stop's line, if the row's fit stopped on it
    try:
        model.fit(keras.utils.experimental.DatasetCreator(train_fn),
                  epochs=cfg.tasks // cfg.steps_per_epoch, steps_per_epoch=steps_per_epoch,
                  verbose=0, callbacks=[progress])
    except tf_hetero.DivergenceError as e:  # the row is measured up to the stop, and marked
        stopped = str(e)
        print(f"[tf-hetero bench] {spec}: {stopped}", flush=True)
    except Exception:
        # Any other failure ends the row (run_bench reports it and goes on): stop what it
        # started so nothing of it runs beside the next row.
        sampler.stop()
        _end_row(strategy, model, (task_log, progress.task_log))
        raise
    fit_wall = time.perf_counter() - t0
    # fit() returns after the last apply: the row's traffic, read before anything else runs.
    traffic = meter.since(traffic_before) if meter is not None else None
    cpu = cpu_meter.since(cpu_before) if cpu_meter is not None else None
    served = (psload.served_figures(served_before, servers.totals())
              if servers is not None else None)
    sampler.stop()
    final = sampler.accuracy()
    sampler.samples.append((time.perf_counter() - t0, final))
    _end_row(strategy, model, (task_log, progress.task_log))

    records = _task_records(strategy, task_log)
    if sampler.failures:
        print(f"[tf-hetero bench] {spec}: {len(sampler.failures)} accuracy evaluation(s) "
              f"failed while training, first: {sampler.failures[0]}", flush=True)
    # One clock for every row: from fit() being called to the last update applied.
    rounds_applied = [r.t_applied for r in strategy.monitor.rounds] if not stock else []
    # A record's size counts work units: k dataset batches, or a sized task's granules.
    unit = granule or k * cfg.batch_size
    figures = metrics.run_figures(records, t0, max(rounds_applied, default=t0), unit)
    steps = ({w: [r.size * granule for r in records if r.worker == w]
              for w in range(cfg.workers)} if granule else
             {w: k * sum(r.worker == w for r in records) for w in range(cfg.workers)})
    ideal = metrics.ideal_over_tasks(cfg.batch_size, profile.base_ms, profile, steps, cfg.workers)
    sps = figures.samples_per_sec
    applied = sum(r.applied for r in records)
    hit = metrics.time_to_target(sampler.samples, cfg.target_accuracy)
    computed = sum(r.size for r in records) * unit
    measured = (traffic.per_sample(computed) if traffic is not None else
                {"bytes_to_ps_per_sample": None, "bytes_from_ps_per_sample": None,
                 "chief_ps_bytes_per_sample": None, "ps_bytes": None,
                 "ps_load_max_over_mean": None})
    # Bytes one step reads from / pushes to each PS, from where the variables are.
    num_ps = cfg.ps
    step_bytes = [r + w for r, w in zip(bytes_per_ps(model.variables, num_ps),
                                        bytes_per_ps(model.trainable_variables, num_ps))]
    ps_figures = {"placement": placement or "round_robin", "ps_step_bytes": step_bytes,
                  "ps_placement_max_over_mean": max_over_mean(step_bytes),
                  "ps_served_bytes": None, "ps_busy_s": None, "ps_wait_s": None,
                  "ps_busy_max_over_mean": None}
    if served is not None:
        ps_figures.update({
            "ps_served_bytes": [served[f"ps{p}_served_bytes"] for p in range(num_ps)],
            "ps_busy_s": [served[f"ps{p}_busy_s"] for p in range(num_ps)],
            "ps_wait_s": [served[f"ps{p}_wait_s"] for p in range(num_ps)],
            "ps_busy_max_over_mean": served["ps_busy_max_over_mean"]})
    if measured.get("ps_load_max_over_mean") is None:
        measured["ps_load_max_over_mean"] = ps_figures["ps_placement_max_over_mean"]
    if stock:
        rounds, engine_figures = len(records), {}
    else:
        s = strategy.monitor.summary()
        engine = strategy.engine
        rounds = len(engine.rounds) if engine and engine.rounds_mode else s["applied_tasks"]
        engine_figures = {
            "mean_staleness": s["mean_staleness"], "max_staleness": s["max_staleness"],
            "mean_round_ms": s["mean_round_ms"] if engine and engine.rounds_mode else None,
            # Where a round's time goes (dispatch, task, barrier, apply, gap; mean ms).
            "round_breakdown_ms": (metrics.round_breakdown(engine.rounds)
                                   if engine and engine.rounds_mode else None)}
        if rebalance:
            engine_figures.update(rebalance_figures(strategy.rebalancer,
                                                    strategy.monitor.rounds))
    result = {
        "strategy": spec,
        "samples_per_sec": sps,
        "efficiency": metrics.efficiency(sps, ideal),
        "time_to_target_s": hit,
        "final_accuracy": final,
        "stopped": stopped,
        **measured,
        **ps_figures,
        # CPU seconds per 1000 samples computed, per role, and the machine's busy share
        # over the fit (telemetry/cpu.py; None for an in-process cluster).
        **cpu_figures(cpu, computed),
        # For reference: one gradient (= the trainable variables), bytes per sample.
        "gradient_bytes_per_sample": sum(v.shape.num_elements() * v.dtype.size
                                         for v in model.trainable_variables) / cfg.batch_size,
        "rounds": rounds,
        "tasks": len(records),  # scheduled closures (steps_per_execution micro-batches each)
        "applied_tasks": applied,
        "dropped_tasks": len(records) - applied,
        "fit_wall_s": fit_wall,
        "span_s": figures.span_s,  # fit() called -> last update applied
        "setup_s": figures.setup_s,  # fit() called -> first task started (in the span)
        "ideal_samples_per_sec": ideal,
        "eval_failures": len(sampler.failures),
        "learning_rate": peak_lr,
        "lr_factor": lr_factor,
        **engine_figures,
        "tasks_per_worker": [sum(r.worker == w for r in records) for w in range(cfg.workers)],
        "samples_per_worker": [sum(r.size for r in records if r.worker == w) * unit
                               for w in range(cfg.workers)],
        "accuracy_curve": list(sampler.samples),
        # On the accuracy curve's clock: seconds since fit() was called.
        "timeline": [(r.worker, r.start - t0, r.end - t0, r.applied) for r in records],
        "num_classes": test.num_classes,
    }
    return result


#: Figures reported as median [min-max] over repeats.
SPREAD_KEYS = ("samples_per_sec", "efficiency", "time_to_target_s", "final_accuracy")


def cpu_figures(cpu: dict | None, samples: int) -> dict:
    """The bench's CPU keys from a :meth:`~tf_hetero.telemetry.cpu.CpuMeter.since` result.

    >>> got = cpu_figures({"cpu_s": {"chief": 1.0, "worker": 2.0, "ps": 1.0},
    ...                    "machine_busy": 0.5}, 2000)
    >>> got["cpu_s_per_1000_samples"], got["machine_busy"]
    ({'chief': 0.5, 'worker': 1.0, 'ps': 0.5, 'total': 2.0}, 0.5)
    >>> cpu_figures(None, 2000)["cpu_s_per_1000_samples"] is None
    True
    """
    if cpu is None or not samples:
        return {"cpu_s_per_1000_samples": None, "machine_busy": None}
    per = {role: 1000 * s / samples for role, s in cpu["cpu_s"].items()}
    per["total"] = sum(per.values())
    return {"cpu_s_per_1000_samples": per, "machine_busy": cpu["machine_busy"]}


def summarize(runs: list[dict], strategies, num_classes: int = 10) -> list[dict]:
    """One row per strategy: at each learning-rate factor, the run with the median
    samples/s stands for its runs (``spread[key]``: median and range of each figure); the
    row is the factor with the best median time to target (then final accuracy), among
    factors that did not diverge (no divergence stop and final accuracy above 1.5x chance,
    in every run)."""
    rows = []
    for spec in strategies:
        candidates = []
        for factor in sorted({r.get("lr_factor", 1.0) for r in runs if r["strategy"] == spec}):
            mine = sorted((r for r in runs if r["strategy"] == spec
                           and r.get("lr_factor", 1.0) == factor),
                          key=lambda r: r["samples_per_sec"])
            row = dict(mine[(len(mine) - 1) // 2])
            row["repeats"] = len(mine)
            row["spread"] = {k: metrics.aggregate([r[k] for r in mine]) for k in SPREAD_KEYS}
            row["diverged"] = any(r.get("stopped") or r["final_accuracy"] <= 1.5 / num_classes
                                  for r in mine)
            candidates.append(row)
        ttt = [c["spread"]["time_to_target_s"]["median"] for c in candidates]
        grid = {c.get("lr_factor", 1.0): t for c, t in zip(candidates, ttt)}
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


def format_table(results: list[dict], cfg: BenchConfig, ideal: float) -> str:
    spread = f", median [min-max] of {cfg.repeats} runs" if cfg.repeats > 1 else ""
    if len(cfg.lr_factors) > 1:
        spread += (f"; each strategy at its best lr of {', '.join(f'{f:g}' for f in cfg.lr_factors)}"
                   " x the rule")
    if cfg.warmup_updates is None:
        spread += ("; lr warm-up over as many updates as an update averages micro-batches "
                   "(none for one-batch updates)")
    elif cfg.warmup_updates > 1:
        spread += f"; lr warm-up over {cfg.warmup_updates} updates for multi-micro-batch updates"
    lines = [f"profile `{cfg.profile}`, {cfg.workers} workers / {cfg.ps} PS, model {cfg.model}, "
             f"data {cfg.dataset} ({cfg.data_per_worker} per worker), {cfg.tasks} "
             f"micro-batches x {cfg.batch_size} samples "
             f"({cfg.steps_per_execution} per task), SGD lr {cfg.base_lr:g} x micro-batches per "
             f"update, momentum {cfg.momentum:g}, target accuracy {cfg.target_accuracy}; "
             f"times from fit() to the last update applied{spread}", "",
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
    parts = ("dispatch", "task", "barrier", "apply", "gap")
    rows = [r for r in results if r.get("round_breakdown_ms")]
    if rows:
        lines += ["", "Where a round's time goes (mean ms per round; docs/MEASUREMENT.md)", "",
                  "| strategy | " + " | ".join(parts) + " | round |",
                  "|---|" + "---:|" * (len(parts) + 1)]
        for r in rows:
            b = r["round_breakdown_ms"]
            lines.append(f"| {r['strategy']} | " + " | ".join(f"{b[p]:.0f}" for p in parts)
                         + f" | {sum(b[p] for p in parts if b[p] == b[p]):.0f} |")
    rows = [r for r in results if r.get("cpu_s_per_1000_samples")]
    if rows:
        lines += ["", "CPU seconds per 1000 samples computed, by process, and the machine's "
                      "busy share over the fit (the chief's includes the accuracy "
                      "evaluations; docs/MEASUREMENT.md)", "",
                  "| strategy | chief | workers | PS | total | machine busy |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in rows:
            c = r["cpu_s_per_1000_samples"]
            busy = f"{r['machine_busy']:.0%}" if r.get("machine_busy") is not None else ""
            lines.append(f"| {r['strategy']} | {c['chief']:.2f} | {c['worker']:.2f} | "
                         f"{c['ps']:.2f} | {c['total']:.2f} | {busy} |")
    return "\n".join(lines)


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


def plot(results: list[dict], cfg: BenchConfig, path: str) -> str:
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
        for w, s, e, applied in r["timeline"]:
            axt.barh(w, e - s, left=s, height=0.7, color=colors(w % 10) if applied else "lightgrey",
                     edgecolor="white", linewidth=0.2)
        axt.set_xlim(0, span)
        axt.set_yticks(range(cfg.workers))
        axt.invert_yaxis()
        axt.set_ylabel(r["strategy"], rotation=0, ha="right", va="center")
        axt.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def sized_rounds(cfg: BenchConfig) -> list[tuple[str, int]]:
    """``(strategy, fit steps per round)`` of every row with per-worker batch sizes: an
    epoch of such a row must hold whole rounds.

    >>> sized_rounds(BenchConfig(strategies=("bsp", "hps8"), workers=4, steps_per_epoch=400))
    [('hps8', 8)]
    """
    from tf_hetero.strategies import registry

    out = []
    for row in cfg.strategies:
        s = split_row(row)[0]
        if registry.entry(registry.parse(s)[0]).sized:
            out.append((s, registry.updates_per_round(s, cfg.workers) * cfg.steps_per_execution))
    return out


def warm_up_tasks(cfg: BenchConfig) -> int:
    """Tasks of each row's untimed warm-up fit: a few rounds of every row, a whole number of
    each sized row's rounds and of ``steps_per_execution``.

    >>> warm_up_tasks(BenchConfig(strategies=("bsp", "hps"), workers=4, steps_per_epoch=400))
    16
    """
    unit = math.lcm(cfg.workers, cfg.steps_per_execution,
                    *(per_round for _, per_round in sized_rounds(cfg)))
    return unit * max(1, -(-4 * cfg.workers // unit))  # >= 4 tasks per worker


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
    from tf_hetero.cluster import LocalCluster

    profile = Profile.parse(cfg.profile)
    os.makedirs(cfg.out_dir, exist_ok=True)
    print(f"[tf-hetero bench] {', '.join(cfg.strategies)} on {cfg.workers} workers / {cfg.ps} PS, "
          f"profile {profile.spec()}", flush=True)
    from tf_hetero.telemetry.cpu import CpuMeter
    from tf_hetero.telemetry.traffic import TrafficMeter

    runs, failed = [], {}
    with LocalCluster(cfg.workers, cfg.ps, profile=profile, processes=True) as cluster:
        meter = TrafficMeter.for_cluster(cluster)
        cpu_meter = CpuMeter.for_cluster(cluster)
        warm_up(cluster, cfg, profile)
        for rep in range(cfg.repeats):
            # A shuffled order per repeat: no row always runs first on a fresh cluster, or
            # always after the same neighbour.
            order = list(cfg.strategies)
            random.Random(cfg.seed + rep).shuffle(order)
            print(f"[tf-hetero bench] repeat {rep + 1}/{cfg.repeats}: {', '.join(order)}",
                  flush=True)
            for spec in order:
                for factor in cfg.lr_factors:
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
                                           seed=cfg.seed + rep, cpu_meter=cpu_meter)
                    except Exception as e:  # pylint: disable=broad-except
                        # One broken row must not lose the others' measurements.
                        first = str(e).strip().splitlines()[-1] if str(e).strip() else ""
                        failed.setdefault(spec, f"{type(e).__name__}: {first}")
                        print(f"[tf-hetero bench] {spec} failed: {failed[spec]}", flush=True)
                        continue
                    run["repeat"] = rep
                    runs.append(run)
    if not runs:
        raise RuntimeError(f"every row failed: {failed}")
    done = [s for s in cfg.strategies if any(r["strategy"] == s for r in runs)]
    results = summarize(runs, done, runs[0]["num_classes"])
    # The ideal of the run each row reports (the profile integrated over its tasks).
    ideal = statistics.median(r["ideal_samples_per_sec"] for r in results)
    table = format_table(results, cfg, ideal)
    paired = paired_table(runs, done)
    if paired:
        table += "\n\n" + paired
    if failed:
        table += "\n\nRows that failed (not in the table):\n\n" + "\n".join(
            f"- {spec}: {why}" for spec, why in failed.items())
    print("\n" + table + "\n", flush=True)
    stem = os.path.splitext(cfg.json_path)[0] if cfg.json_path else os.path.join(cfg.out_dir, "bench")
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    with open(stem + ".json", "w") as f:
        json.dump({"config": dataclasses.asdict(cfg), "ideal_samples_per_sec": ideal,
                   "results": results, "runs": runs, "failed": failed}, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(table + "\n")
    plot(results, cfg, stem + ".png")
    print(f"[tf-hetero bench] wrote {stem}.json, .md and .png", flush=True)
    if failures is not None:
        failures.update(failed)
    return results
