"""One row of ``tf-hetero bench``: one strategy trained once on a running local cluster and
measured (:func:`run_strategy`). Every row builds the same model from the same seed, trains
it with SGD with momentum at the rate of the linear rule (:mod:`tf_hetero.policies.lr`,
:func:`keras_learning_rate`) for the same sample budget, and is timed on one clock, from
``fit()`` being called to the last update applied (the final apply, a pipelined drain round
or a fold-only round included); ``setup_s`` reports the part before the first task started.

The row's JSON keys (one dict per run):

- ``samples_per_sec``: applied samples / span; dropped tasks (backup workers) do not count;
- ``efficiency``: ``samples_per_sec`` / the ideal of that run, the workers' capacities
  integrated over the tasks they ran (:func:`tf_hetero.telemetry.perf.ideal_over_tasks`);
- ``time_to_target_s``: seconds from ``fit()`` until the held-out accuracy, sampled every
  ``eval_interval_s`` while training runs (the weights read then from the chief, evaluated
  after the fit), first reaches the target (``null`` if never; ``eval_failures`` counts
  samples whose read or evaluation raised);
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

TensorFlow is imported by the functions that train, not by importing this module.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from tf_hetero import data, models, tfcompat
from tf_hetero.emulation.profile import Profile
from tf_hetero.policies import lr as lr_rule
from tf_hetero.policies.diverge import DivergenceError
from tf_hetero.policies.placement import Balanced, max_over_mean
from tf_hetero.strategies import registry
from tf_hetero.telemetry import perf as metrics
from tf_hetero.telemetry import psload
from tf_hetero.telemetry.tasklog import TaskLog
from tf_hetero.tools.benchconfig import BenchConfig, split_row
from tf_hetero.tools.sampler import AccuracySampler

__all__ = ["run_strategy", "keras_learning_rate", "cpu_figures", "rebalance_figures"]

#: Strategies and models of the rows already measured (see _end_row).
_FINISHED_ROWS: list = []


class _Meters:
    """A row's meters (bytes on the sockets, CPU time, the emulated PS tasks' counters, the
    emulated device's step stamps; each may be ``None``), read before and after its fit."""

    def __init__(self, traffic, cpu, servers, stamps=None):
        self.traffic, self.cpu, self.servers, self.stamps = traffic, cpu, servers, stamps
        self._before = (None, None, None)

    def start(self) -> None:
        self._before = (self.traffic.snapshot() if self.traffic is not None else None,
                        self.cpu.snapshot() if self.cpu is not None else None,
                        self.servers.totals() if self.servers is not None else None)

    def stop(self) -> tuple:
        """``(traffic, cpu, served, stamps)`` over the fit (``None`` where there is no
        meter); ``stamps``: the workers' step stamps and the chief's ``time.time() -
        time.perf_counter()`` (:mod:`tf_hetero.telemetry.roundprofile`)."""
        traffic, cpu, served = self._before
        return (self.traffic.since(traffic) if self.traffic is not None else None,
                self.cpu.since(cpu) if self.cpu is not None else None,
                psload.served_figures(served, self.servers.totals())
                if self.servers is not None else None,
                (self.stamps.stamps_per_worker(), time.time() - time.perf_counter())
                if self.stamps is not None else None)


@dataclasses.dataclass
class _Row:
    """A row being measured: its strategy and model as built, and its learning rate."""
    spec: str
    placement: str | None
    rebalance: bool
    keras3: bool  # a Keras 3 model (``+keras3``), not a tf_keras one
    strategy: object
    model: object
    stock: bool
    granule: int | None
    per_update: int  # micro-batches one update averages
    peak_lr: float
    lr_factor: float
    momentum: float


@dataclasses.dataclass
class _Fit:
    """What a row's timed fit left: its clock, why it stopped early (a divergence), and the
    meters' readings over it."""
    t0: float
    wall_s: float
    stopped: str | None
    traffic: object
    cpu: dict | None
    served: dict | None
    final_accuracy: float
    stamps: tuple | None = None


def keras_learning_rate(cfg: BenchConfig, per_update: int, factor: float = 1.0,
                        keras3: bool = False):
    """The SGD learning rate of a row as tf_keras (``keras3``: Keras 3) takes it: the linear
    rule (:func:`~tf_hetero.policies.lr.linear_rate`), ramped up linearly over
    :func:`~tf_hetero.policies.lr.warmup_updates` updates when an update averages several
    micro-batches (:func:`~tf_hetero.policies.lr.warmup_schedule`, in TensorFlow ops).

    >>> keras_learning_rate(BenchConfig(strategies=("bsp",), warmup_updates=0), 4)
    0.08
    >>> lr = keras_learning_rate(BenchConfig(strategies=("bsp",)), 4)   # warm-up over 4 updates
    >>> [round(float(lr(step)), 3) for step in (0, 1, 3, 10)]
    [0.02, 0.04, 0.08, 0.08]
    """
    peak = lr_rule.linear_rate(cfg.base_lr, per_update, factor)
    ramp_updates = lr_rule.warmup_updates(cfg.warmup_updates, per_update)
    if ramp_updates <= 1:
        return peak
    keras = models.keras_module(keras3)

    class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            import tensorflow as tf

            ramp = tf.cast(step + 1, tf.float32) / float(ramp_updates)
            return peak * tf.minimum(1.0, ramp)

        def get_config(self):
            return {"peak": peak, "warmup_updates": ramp_updates}

    return WarmUp()


def _make_row(spec: str, cluster, cfg: BenchConfig, profile: Profile, lr_factor: float,
              seed: int, train, momentum: float | None = None) -> _Row:
    """Builds the row's strategy (its placement and rebalancing) and compiles its model;
    ``momentum`` other than ``cfg.momentum`` scales the rate by ``(1 - m) / (1 -
    cfg.momentum)`` (the same ``lr / (1 - m)``)."""
    from tf_hetero.strategies.base import HeteroStrategy

    base, placement, rebalance, keras3, failover = split_row(spec)
    keras = models.keras_module(keras3)
    if keras3:  # Keras 3 fit on the cluster's workers (tf_hetero.keras3.enable; idempotent)
        from tf_hetero.strategies.runtime import keras3 as keras3_on_ps

        keras3_on_ps.install()
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
    if failover:
        strategy.set_failover(failover)  # the same (True, or the rounds between copies)
    k = cfg.steps_per_execution
    per_update = registry.updates_per_round(base, cfg.workers) * k
    granule = getattr(getattr(strategy, "config", None), "granule", None)
    momentum = cfg.momentum if momentum is None else momentum
    lr_factor_m = lr_factor * (1 - momentum) / (1 - cfg.momentum)
    with strategy.scope():
        model = models.build(cfg.model, input_shape=train.input_shape,
                             num_classes=train.num_classes, seed=seed, keras3=keras3)
        model.compile(keras.optimizers.SGD(keras_learning_rate(cfg, per_update, lr_factor_m,
                                                               keras3),
                                           momentum=momentum),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=k)
    peak_lr = lr_rule.linear_rate(cfg.base_lr, per_update, lr_factor_m)
    return _Row(spec, placement, rebalance, keras3, strategy, model,
                stock=not isinstance(strategy, HeteroStrategy), granule=granule,
                per_update=per_update, peak_lr=peak_lr, lr_factor=lr_factor,
                momentum=momentum)


def run_strategy(spec: str, cluster, cfg: BenchConfig, profile: Profile,
                 lr_factor: float = 1.0, meter=None, seed: int | None = None,
                 cpu_meter=None, momentum: float | None = None) -> dict:
    """Trains once under ``spec`` at ``lr_factor`` x the linear rule and measures it, from
    ``seed`` (model initialisation and data order; default ``cfg.seed``); returns the row's
    JSON keys. ``meter`` and ``cpu_meter``: the cluster's
    :class:`~tf_hetero.telemetry.traffic.TrafficMeter` and
    :class:`~tf_hetero.telemetry.cpu.CpuMeter` (``None``: not measured)."""
    from tf_hetero.emulation.device import emulate

    seed = cfg.seed if seed is None else seed
    train, test = data.load(cfg.dataset, "train"), data.load(cfg.dataset, "test")
    row = _make_row(spec, cluster, cfg, profile, lr_factor, seed, train, momentum)
    # base_ms is one dataset batch's time for every row; a sized task's step (H-PS) takes
    # it in proportion to the samples it reads.
    # With --round-profile, every step's stamps in a ring that holds the whole fit's steps.
    stamps = cfg.tasks * cfg.steps_per_execution + 64 if cfg.round_profile else 0
    device = emulate(row.model, profile, strategy=row.strategy, batch_size=cfg.batch_size,
                     stamps=stamps)
    task_log = TaskLog.for_strategy(row.strategy) if row.stock else None
    twin = models.build(cfg.model, input_shape=train.input_shape, num_classes=train.num_classes,
                        seed=seed, keras3=row.keras3)  # on the chief, outside the strategy
    sampler = AccuracySampler(row.model, twin, test.x, test.y, cfg.eval_interval_s)
    train_fn = data.dataset_fn(batch_size=cfg.batch_size, num_workers=cfg.workers,
                               seed=seed, data=train, per_worker=cfg.data_per_worker)
    ramp = lr_rule.warmup_updates(cfg.warmup_updates, row.per_update)
    print(f"[tf-hetero bench] {spec}: {cfg.tasks} tasks of {cfg.batch_size} samples, "
          f"lr {row.peak_lr:g}{f' (warm-up {ramp} updates)' if ramp > 1 else ''}", flush=True)
    fit = _timed_fit(row, cfg, train_fn, sampler, task_log,
                     _Meters(meter, cpu_meter, device.servers, device if stamps else None))
    records = task_log.records if task_log is not None else list(row.strategy.monitor.tasks)
    if sampler.failures:
        print(f"[tf-hetero bench] {spec}: {len(sampler.failures)} accuracy evaluation(s) "
              f"failed while training, first: {sampler.failures[0]}", flush=True)
    return _row_figures(row, cfg, profile, records, fit, sampler, test.num_classes)


def _timed_fit(row: _Row, cfg: BenchConfig, train_fn, sampler: AccuracySampler,
               task_log, meters: _Meters) -> _Fit:
    """The row's ``fit``, timed, with the accuracy sampled and the meters read around it.
    A divergence stop ends it measured (and marked); any other error ends the row."""
    from tf_hetero.callbacks import Progress

    meters.start()
    t0 = time.perf_counter()
    sampler.start(t0)
    progress = Progress(5.0, task_log=task_log or TaskLog.for_strategy(row.strategy))
    stopped = None  # the divergence stop's line, if the row's fit stopped on it
    try:
        if row.keras3:  # Keras 3 on the cluster takes a dataset function as it is
            train = train_fn
        else:
            train = models.keras_module().utils.experimental.DatasetCreator(train_fn)
        row.model.fit(train,
                      epochs=cfg.tasks // cfg.steps_per_epoch,
                      steps_per_epoch=cfg.steps_per_epoch, verbose=0, callbacks=[progress])
    except DivergenceError as e:  # the row is measured up to the stop, and marked
        stopped = str(e)
        print(f"[tf-hetero bench] {row.spec}: {stopped}", flush=True)
    except Exception:
        # Any other failure ends the row (run_bench reports it and goes on): stop what it
        # started so nothing of it runs beside the next row.
        sampler.stop()
        _end_row(row.strategy, row.model, (task_log, progress.task_log))
        raise
    wall_s = time.perf_counter() - t0
    # fit() returns after the last apply: the row's traffic, read before anything else runs.
    traffic, cpu, served, stamps = meters.stop()
    sampler.stop()
    final = sampler.finish()
    _end_row(row.strategy, row.model, (task_log, progress.task_log))
    return _Fit(t0, wall_s, stopped, traffic, cpu, served, final, stamps)


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


def _row_figures(row: _Row, cfg: BenchConfig, profile: Profile, records, fit: _Fit,
                 sampler: AccuracySampler, num_classes: int) -> dict:
    """The row's JSON keys (the module's docstring), from its task records and its fit."""
    # One clock for every row: from fit() being called to the last update applied.
    rounds_applied = [r.t_applied for r in row.strategy.monitor.rounds] if not row.stock else []
    # A record's size counts work units: k dataset batches, or a sized task's granules (of
    # the size the strategy chose for this data: HeteroStrategy.granule).
    granule = getattr(row.strategy, "granule", None) if row.granule else None
    unit = granule or cfg.steps_per_execution * cfg.batch_size
    figures = metrics.run_figures(records, fit.t0, max(rounds_applied, default=fit.t0), unit)
    ideal = _ideal(records, cfg, profile, granule)
    sps = figures.samples_per_sec
    applied = sum(r.applied for r in records)
    computed = sum(r.size for r in records) * unit
    measured = (fit.traffic.per_sample(computed) if fit.traffic is not None else
                {"bytes_to_ps_per_sample": None, "bytes_from_ps_per_sample": None,
                 "chief_ps_bytes_per_sample": None, "ps_bytes": None,
                 "ps_load_max_over_mean": None})
    ps_figures = _ps_figures(row, cfg.ps, fit.served)
    if measured.get("ps_load_max_over_mean") is None:
        measured["ps_load_max_over_mean"] = ps_figures["ps_placement_max_over_mean"]
    rounds, engine_figures = _engine_figures(row, records)
    trainable = row.model.trainable_variables
    return {
        "strategy": row.spec,
        "samples_per_sec": sps,
        "efficiency": metrics.efficiency(sps, ideal),
        "time_to_target_s": metrics.time_to_target(sampler.samples, cfg.target_accuracy),
        "final_accuracy": fit.final_accuracy,
        "stopped": fit.stopped,
        **measured,
        **ps_figures,
        # CPU seconds per 1000 samples computed, per role, and the machine's busy share
        # over the fit (telemetry/cpu.py; None for an in-process cluster).
        **cpu_figures(fit.cpu, computed),
        # For reference: one gradient (= the trainable variables), bytes per sample.
        "gradient_bytes_per_sample": tfcompat.keras3.nbytes(trainable) / cfg.batch_size,
        "rounds": rounds,
        "tasks": len(records),  # scheduled closures (steps_per_execution micro-batches each)
        "applied_tasks": applied,
        "dropped_tasks": len(records) - applied,
        "fit_wall_s": fit.wall_s,
        "span_s": figures.span_s,  # fit() called -> last update applied
        "setup_s": figures.setup_s,  # fit() called -> first task started (in the span)
        "ideal_samples_per_sec": ideal,
        "eval_failures": len(sampler.failures),
        "learning_rate": row.peak_lr,
        "lr_factor": row.lr_factor,
        "momentum": row.momentum,
        **engine_figures,
        "tasks_per_worker": [sum(r.worker == w for r in records) for w in range(cfg.workers)],
        "samples_per_worker": [sum(r.size for r in records if r.worker == w) * unit
                               for w in range(cfg.workers)],
        "accuracy_curve": list(sampler.samples),
        # On the accuracy curve's clock: seconds since fit() was called.
        "timeline": [(r.worker, r.start - fit.t0, r.end - fit.t0, r.applied) for r in records],
        "num_classes": num_classes,
        # --round-profile: where a round's (a stock step's) time goes, phase by phase.
        "round_profile": (_round_profile(row, records, fit)
                          if fit.stamps is not None else None),
    }


#: Rounds (steps per worker) a round profile leaves out at the start of a fit: the first
#: traces the functions; ``first_ms`` reports it.
PROFILE_SKIP = 3


def _round_profile(row: _Row, records, fit: _Fit) -> dict:
    """The row's :mod:`~tf_hetero.telemetry.roundprofile` (rounds for a strategy with
    rounds, steps otherwise), with the CPU milliseconds each process role spent per round
    (per step) over the fit, setup included."""
    from tf_hetero.telemetry import roundprofile

    stamps, offset = fit.stamps
    engine = None if row.stock else row.strategy.engine
    if engine is not None and engine.rounds:
        applies = list(row.strategy.coordinator.applier.timings)
        profile = roundprofile.round_profile(engine.rounds, stamps, offset, applies,
                                             skip=PROFILE_SKIP)
        per = sum(1 for r in engine.rounds if str(r.kind) == "train" and r.applied > 0)
    else:
        profile = roundprofile.step_profile(records, stamps, offset, skip=PROFILE_SKIP)
        per = len(records)
    if fit.cpu is not None and per:
        profile["cpu_ms"] = {role: 1e3 * s / per for role, s in fit.cpu["cpu_s"].items()}
    return profile


def _ideal(records, cfg: BenchConfig, profile: Profile, granule: int | None) -> float:
    """The ideal samples/s of the run: the profile's capacities over the steps each worker
    ran (a sized task's granules, or ``steps_per_execution`` steps a task)."""
    k = cfg.steps_per_execution
    steps = ({w: [r.size * granule for r in records if r.worker == w]
              for w in range(cfg.workers)} if granule else
             {w: k * sum(r.worker == w for r in records) for w in range(cfg.workers)})
    return metrics.ideal_over_tasks(cfg.batch_size, profile.base_ms, profile, steps, cfg.workers)


def _ps_figures(row: _Row, num_ps: int, served: dict | None) -> dict:
    """Per-PS load: bytes one step reads from / pushes to each PS, from where the variables
    are, and what the emulated PS tasks served over the fit (``served``; ``None``: none)."""
    from tf_hetero.emulation.ps import bytes_per_ps

    model = row.model
    step_bytes = [r + w for r, w in zip(bytes_per_ps(model.variables, num_ps),
                                        bytes_per_ps(model.trainable_variables, num_ps))]
    figures = {"placement": row.placement or "round_robin", "ps_step_bytes": step_bytes,
               "ps_placement_max_over_mean": max_over_mean(step_bytes),
               "ps_served_bytes": None, "ps_busy_s": None, "ps_wait_s": None,
               "ps_busy_max_over_mean": None}
    if served is not None:
        figures.update({
            "ps_served_bytes": [served[f"ps{p}_served_bytes"] for p in range(num_ps)],
            "ps_busy_s": [served[f"ps{p}_busy_s"] for p in range(num_ps)],
            "ps_wait_s": [served[f"ps{p}_wait_s"] for p in range(num_ps)],
            "ps_busy_max_over_mean": served["ps_busy_max_over_mean"]})
    return figures


def _engine_figures(row: _Row, records) -> tuple[int, dict]:
    """``(applied updates, the engine's figures)``: staleness, round times and where a
    round's time goes, and rebalancing's moves (none for stock PSS, whose every task is an
    update)."""
    if row.stock:
        return len(records), {}
    strategy = row.strategy
    s = strategy.monitor.summary()
    engine = strategy.engine
    switches = bool(engine) and strategy.config.switches_modes
    rounds_mode = bool(engine and (engine.rounds_mode or switches and engine.rounds))
    # Updates applied: rounds, asynchronous steps, or both (a strategy that switches).
    rounds = (engine.version if switches else len(engine.rounds) if rounds_mode
              else s["applied_tasks"])
    figures = {
        "mean_staleness": s["mean_staleness"], "max_staleness": s["max_staleness"],
        "mean_round_ms": s["mean_round_ms"] if rounds_mode else None,
        # Where a round's time goes (dispatch, task, barrier, apply, gap; mean ms).
        "round_breakdown_ms": metrics.round_breakdown(engine.rounds) if rounds_mode else None,
        # The gradient noise the rounds' applies measured (per sample).
        "noise_scale": s.get("noise_scale"), "grad_variance": s.get("grad_variance"),
        "grad_sq": s.get("grad_sq")}
    controller = getattr(strategy, "controller", None)
    if controller is not None:  # the adaptive strategy: what it decided, and when
        monitor = strategy.monitor
        figures["auto_decisions"] = [
            {"t_s": t - monitor.t0, **{k: info[k] for k in ("mode", "global_batch", "gain",
                                                             "why")}}
            for t, name, info in monitor.events if name == "auto_decision"]
        figures.update({k: s.get(k) for k in ("auto_sized", "auto_global_batch", "auto_gain")})
    if row.rebalance:
        figures.update(rebalance_figures(strategy.rebalancer, strategy.monitor.rounds))
    failover = strategy.coordinator.failover if not row.stock else None
    if failover is not None:  # what keeping the copies cost (on the apply thread)
        copy = failover.copy
        figures.update(failover_copies=failover.copies,
                       failover_copy_ms=(1e3 * statistics.median(failover.copy_s)
                                         if failover.copy_s else None),
                       failover_copy_bytes=copy.nbytes if copy is not None else None,
                       failover_bytes_per_round=(copy.nbytes / failover.config.every
                                                 if copy is not None else None))
    return rounds, figures


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
