"""What each named strategy gives the round engine, pure Python (no TensorFlow): the
:class:`EngineConfig` (policies and components) of ASP, BSP, backup workers, SSP, EPSP and
H-PS, built and checked here once. The strategy classes (:mod:`~tf_hetero.strategies.presets`,
:mod:`~tf_hetero.strategies.epsp`, :mod:`~tf_hetero.strategies.hps`) pass it to
:class:`~tf_hetero.strategies.base.HeteroStrategy`; the simulator (:mod:`tf_hetero.sim`)
drives the same engine with it, so both run the same policies.

>>> c = bsp()
>>> c.sync, c.assign, c.uses_engine
(AllTasks(), OnePerWorker(), True)
>>> asp().uses_engine                       # every task applied at once: no engine
False
>>> epsp(4, sync="slack").components
(TaskTransfer(TransferAfter(factor=1.5), extra_lanes=4), LateFolding(StalenessWeight(max_staleness=8, power=1.0)))
>>> hps(4, pipeline=True).local, hps(4).granule
(LocalAccumulation('pipelined'), 8)
>>> backup(4, backups=4)
Traceback (most recent call last):
...
ValueError: BackupWorkerStrategy(backups=4) with 4 workers: need an integer from 0 to 3.
"""

from __future__ import annotations

import dataclasses
import math

from tf_hetero import policies
from tf_hetero.engine import LateFolding, LocalAccumulation, TaskTransfer
from tf_hetero.engine.api import ReportsFigures

__all__ = ["EngineConfig", "batch_sizes", "asp", "bsp", "backup", "ssp", "epsp", "hps",
           "grouped", "dynsgd", "casp", "auto",
           "EPSP_TICK_S", "CODECS", "GRANULE", "check_epsp_modes"]

#: Push codecs of H-PS by canonical name (:mod:`tf_hetero.strategies.runtime.quantize`).
CODECS = ("fp32", "fp16", "int8", "int4")
#: Samples per work unit of sized tasks unless a granularity is given (a divisor of the
#: dataset's batch is taken when 8 does not divide it).
GRANULE = 8
#: EPSP: seconds between engine ticks: how late a slack deadline or a transfer can fire.
EPSP_TICK_S = 0.005


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """What the round engine does with the tasks ``model.fit`` schedules.

    ``sync``/``assign``/``gate`` are policies (:mod:`tf_hetero.policies`); ``components``
    are engine mechanisms (:class:`~tf_hetero.engine.LocalAccumulation`,
    :class:`~tf_hetero.engine.TaskTransfer`, :class:`~tf_hetero.engine.LateFolding`).
    Async sync with no gate and no component needs no engine: every task is applied at once
    as stock TF does (:class:`~tf_hetero.strategies.presets.ASPStrategy`).
    """

    name: str
    sync: object = dataclasses.field(default_factory=policies.Async)
    assign: object = dataclasses.field(default_factory=policies.OnePerWorker)
    gate: object = dataclasses.field(default_factory=policies.Unbounded)
    #: Seconds ``join``/``fetch`` may see no task or round finish before they give up with an
    #: error (TF alone would wait up to an hour for a dead worker).
    stall_timeout_s: float = 600.0
    components: tuple = ()
    #: Seconds between engine ticks (deadlines, transfer); 0 disables the ticker.
    tick_s: float = 0.0
    #: Codec of local-accumulation pushes (:mod:`tf_hetero.strategies.runtime.quantize`).
    codec: str = "fp32"
    #: Sized tasks (per-worker batch sizes): samples per work unit. The strategy re-batches
    #: the workers' data into granules of this size and a task of size n reads n of them as
    #: one batch (:mod:`tf_hetero.strategies.runtime.granules`); ``assign`` must size tasks
    #: (``set_units``). ``None``: a task reads one dataset batch per step.
    granule: int | None = None
    #: Sized tasks: ``granule`` was asked for (a granularity, global batch, min_samples or
    #: memory budget given): a dataset batch it does not divide is refused. ``False``: the
    #: default granule, which a batch it does not divide replaces by their greatest common
    #: divisor (:meth:`granule_for`).
    granule_fixed: bool = True
    #: Sized tasks: samples per round (``None``: ``round_batches`` x the dataset's batch).
    global_batch: int | None = None
    #: Sized tasks: dataset batches per round when ``global_batch`` is not given (``None``:
    #: one per worker, BSP's global batch).
    round_batches: int | None = None
    #: Grouped sync: a :class:`~tf_hetero.engine.api.GroupingPolicy` (one book of rounds
    #: per group, each with ``sync`` and ``assign``); ``None``: one book of all workers.
    grouping: object = None
    #: How much each round's mean gradient counts (:class:`~tf_hetero.engine.api.UpdateScale`).
    update_scale: object = None

    def __post_init__(self):
        if not (isinstance(self.stall_timeout_s, (int, float)) and self.stall_timeout_s > 0):
            raise ValueError(f"stall_timeout_s={self.stall_timeout_s!r}: need seconds > 0.")
        if self.sync.mode not in ("rounds", "async"):
            raise ValueError(f"sync policy {self.sync!r} has mode {self.sync.mode!r}; "
                             "expected 'rounds' or 'async'.")
        object.__setattr__(self, "components", tuple(self.components))
        if self.granule is not None and not hasattr(self.assign, "set_units"):
            raise ValueError(f"granule={self.granule}: the assignment policy {self.assign!r} "
                             "does not size tasks (it has no set_units).")

    @property
    def uses_engine(self) -> bool:
        return (self.sync.mode == "rounds" or not isinstance(self.gate, policies.Unbounded)
                or bool(self.components))

    @property
    def switches_modes(self) -> bool:
        """Does the sync policy switch between rounds and asynchronous steps during a fit
        (the adaptive strategy)? Then every step is traced both ways, each task is made for
        the mode current when it is scheduled, and at most ``sync.max_pending`` are queued."""
        return bool(getattr(self.sync, "switches", False))

    @property
    def local(self) -> LocalAccumulation | None:
        """The local-accumulation component (H-PS), if any."""
        return next((c for c in self.components if isinstance(c, LocalAccumulation)), None)

    def granule_for(self, batch: int) -> int | None:
        """The granule a dataset of ``batch`` samples per step is re-batched into: the
        configured one, or (the default, ``granule_fixed=False``) the greatest common divisor
        of the batch and it when it does not divide the batch (tf_keras's own PS tests use
        batches of 2, 4 and 12).

        >>> hps(4).granule_for(32), hps(4).granule_for(12), hps(4).granule_for(2)
        (8, 4, 2)
        >>> hps(4, granularity=8).granule_for(12)
        8
        """
        g = self.granule
        if g is None or self.granule_fixed or batch % g == 0:
            return g
        return math.gcd(batch, g)

    def bind_data(self, workers: int, batch: int, who: str = "") -> int:
        """Sized tasks, once the dataset's batch is known: the round's global batch in
        granules for the assignment policy (its ``bind`` if it has one: the adaptive
        strategy's controller, which keeps the batch it chose); returns the global batch in
        samples.
        The strategy (``HeteroStrategy._granulate``) and the simulator both call it.

        >>> c = hps(4)
        >>> c.bind_data(4, 32), c.assign.units, c.assign.step_units
        (128, 16, 4)
        """
        g = self.granule_for(batch)
        global_batch = self.global_batch or (self.round_batches or workers) * batch
        if global_batch % g:
            raise ValueError(f"{who or self.name}(global_batch={global_batch}) is not a "
                             f"multiple of granularity={g}.")
        bind = getattr(self.assign, "bind", None)
        if bind is not None:
            bind(workers, batch // g, g)
            return self.assign.units * g
        self.assign.set_units(global_batch // g, batch // g)
        return global_batch

    def summaries(self) -> list:
        """Policies' own monitor figures (``summary(rounds, num_workers)``)."""
        return [p.summary for p in (self.sync, self.assign, self.gate, self.grouping)
                if isinstance(p, ReportsFigures)]


def batch_sizes(who: str, workers: int, global_batch, granularity, min_samples=None,
                memory_budget=None, alpha=policies.estimate.DEFAULT_ALPHA, round_batches=None):
    """The :class:`~tf_hetero.policies.BalancedBatches` of a strategy with per-worker batch
    sizes: every setting in samples, checked before connecting (errors name ``who``), then
    converted to granules. ``granularity=None``: :data:`GRANULE` samples, or a divisor of the
    dataset's batch when it does not divide it (:meth:`EngineConfig.granule_for`)."""
    g = GRANULE if granularity is None else granularity
    if not isinstance(g, int) or isinstance(g, bool) or g < 1:
        raise ValueError(f"{who}(granularity={g!r}): need samples >= 1 (e.g. 8).")
    if round_batches is not None:
        if global_batch is not None:
            raise ValueError(f"{who}: give global_batch (samples) or round_batches (dataset "
                             "batches per round), not both.")
        if not isinstance(round_batches, int) or isinstance(round_batches, bool) or round_batches < 1:
            raise ValueError(f"{who}(round_batches={round_batches!r}): need an integer >= 1.")
    min_samples = g if min_samples is None else min_samples
    for name, v in (("global_batch", global_batch), ("min_samples", min_samples)):
        if v is not None and (not isinstance(v, int) or v < g or v % g):
            raise ValueError(f"{who}({name}={v!r}): need a multiple of granularity={g}.")
    if global_batch is not None and global_batch < workers * min_samples:
        raise ValueError(f"{who}(global_batch={global_batch}) with {workers} workers: need "
                         f">= {workers * min_samples} (min_samples={min_samples} per worker).")
    budgets = (None if memory_budget is None else
               [memory_budget] * workers if isinstance(memory_budget, int) else list(memory_budget))
    if budgets is not None:
        bad = [b for b in budgets if not isinstance(b, int) or b < min_samples]
        if bad:
            raise ValueError(f"{who}(memory_budget={memory_budget!r}): every budget must "
                             f"be an integer >= min_samples={min_samples} samples per task.")
        if global_batch is not None and sum(b // g for b in budgets) * g < global_batch:
            raise ValueError(f"{who}: the memory budgets hold {sum(budgets)} samples per "
                             f"round, fewer than global_batch={global_batch}. Fix: raise "
                             "memory_budget or lower global_batch.")
        budgets = [b // g for b in budgets]
    return policies.BalancedBatches(None, min_samples // g, budgets, alpha)


# ------------------------------------------------------------------ the named strategies
# Every function takes the number of workers first (unused by those that do not depend on
# it), so the registry builds any of them the same way.
def asp(workers: int | None = None, stall_timeout_s: float = 600.0,
        name: str = "asp") -> EngineConfig:
    """Asynchronous parallel: every task applied at once (stock TF behaviour)."""
    return EngineConfig(name, stall_timeout_s=stall_timeout_s)


def bsp(workers: int | None = None, stall_timeout_s: float = 600.0) -> EngineConfig:
    """One task per worker per round; the round waits for all."""
    return EngineConfig("bsp", policies.AllTasks(), policies.OnePerWorker(),
                        stall_timeout_s=stall_timeout_s)


def backup(workers: int, backups: int = 1, stall_timeout_s: float = 600.0) -> EngineConfig:
    """Backup workers: a round applies the first N - ``backups`` tasks in."""
    if not isinstance(backups, int) or isinstance(backups, bool) or not 0 <= backups < workers:
        raise ValueError(f"BackupWorkerStrategy(backups={backups!r}) with {workers} workers: "
                         f"need an integer from 0 to {workers - 1}.")
    return EngineConfig(f"backup{backups}", policies.FirstK(backups), policies.OnePerIdleWorker(),
                        stall_timeout_s=stall_timeout_s)


def ssp(workers: int, staleness: int = 3, stall_timeout_s: float = 600.0) -> EngineConfig:
    """Async, but no worker more than ``staleness`` tasks ahead of the slowest.

    Each task is a one-task round of its worker's own book, applied by the chief as DynSGD's
    are (with the update unscaled), so a task TF re-runs after a worker failure overwrites
    its planned lane instead of applying its gradient twice: every task is applied exactly
    once (a step applied on its worker, as stock TF does, cannot tell that its update
    already landed). The gate keeps a worker's book from opening a round while the worker is
    more than ``staleness`` applied tasks ahead of the slowest live worker.

    >>> c = ssp(3, staleness=2)
    >>> c.name, c.gate, c.grouping, c.update_scale.scale(group_size=1, num_workers=3, staleness=4)
    ('ssp2', StalenessBound(2), FixedGroups([[0], [1], [2]]), 1.0)
    """
    if not isinstance(staleness, int) or isinstance(staleness, bool) or staleness < 0:
        raise ValueError(f"SSPStrategy(staleness={staleness!r}): need an integer >= 0.")
    return dataclasses.replace(
        grouped(workers, groups=[[w] for w in range(workers)], lr_rule="none",
                staleness="none", stall_timeout_s=stall_timeout_s),
        name=f"ssp{staleness}", gate=policies.StalenessBound(staleness))


def check_epsp_modes(sync: str, late: str) -> None:
    """EPSP's ``sync`` and ``late`` arguments, checked (a clear error names the bad one)."""
    if sync not in ("enforced", "slack"):
        raise ValueError(f"EPSPStrategy(sync={sync!r}): use 'enforced' or 'slack'.")
    if late not in ("fold", "drop"):
        raise ValueError(f"EPSPStrategy(late={late!r}): use 'fold' or 'drop'.")


def epsp(workers: int, *, sync: str = "enforced", round_tasks: int | None = None,
         global_batch: int | None = None, round_batches: int | None = None,
         granularity: int | None = None, straggler_factor: float = 1.5, window: int = 8,
         probe_every: int = 8, transfer_factor: float | None = 1.5, quorum: float = 0.75,
         deadline_factor: float = 2.0, late: str = "fold", max_staleness: int = 8,
         stall_timeout_s: float = 600.0) -> EngineConfig:
    """EPSP (arguments: :class:`~tf_hetero.strategies.epsp.EPSPStrategy`)."""
    check_epsp_modes(sync, late)
    batches, granule = None, None
    if round_tasks is None:  # per-worker batch sizes
        batches = batch_sizes("EPSPStrategy", workers, global_batch, granularity,
                              round_batches=round_batches)
        granule, round_tasks = granularity or GRANULE, workers
    elif global_batch is not None or round_batches is not None:
        raise ValueError("EPSPStrategy: give global_batch or round_batches (per-worker "
                         "batch sizes) or round_tasks (pulled micro-batch tasks), not both.")
    if not isinstance(round_tasks, int) or round_tasks < 1:
        raise ValueError(f"EPSPStrategy(round_tasks={round_tasks!r}): need an integer >= 1 "
                         f"(default: the number of workers, {workers}).")
    # Every policy is built here, so a bad value fails before connecting to the cluster.
    projection = policies.StragglerProjection(window=window, factor=straggler_factor,
                                              min_samples=min(3, window))
    slack = sync == "slack"
    slack_sync = policies.SlackSync(quorum, deadline_factor)  # checked in either mode
    components = []
    if transfer_factor:
        components.append(TaskTransfer(policies.TransferAfter(transfer_factor),
                                       extra_lanes=workers))
    if slack and late == "fold":
        components.append(LateFolding(policies.StalenessWeight(max_staleness)))
    return EngineConfig(
        f"epsp-{sync}",
        sync=slack_sync if slack else policies.AllTasks(),
        assign=policies.ElasticParallelism(round_tasks, projection, probe_every,
                                           keep_stragglers=slack, batches=batches),
        components=tuple(components), tick_s=EPSP_TICK_S, stall_timeout_s=stall_timeout_s,
        granule=granule, global_batch=global_batch, round_batches=round_batches,
        granule_fixed=granularity is not None or global_batch is not None,
        # A slack round closes at a quorum: its step follows the samples it averages.
        update_scale=policies.SampledScale() if slack else None)


def hps(workers: int, *, codec: str = "fp32", global_batch: int | None = None,
        round_batches: int | None = None, granularity: int | None = None, min_samples: int | None = None,
        memory_budget=None, round_tasks: int | None = None, min_tasks: int = 1,
        alpha: float = policies.estimate.DEFAULT_ALPHA, pipeline: bool = False,
        overlap: bool = False, stall_timeout_s: float = 600.0) -> EngineConfig:
    """H-PS (arguments: :class:`~tf_hetero.strategies.hps.HPSStrategy`; ``codec`` is the
    canonical name of its push codec: fp32, fp16, int8, int4)."""
    if codec not in CODECS:
        raise ValueError(f"HPSStrategy codec {codec!r}: use one of {', '.join(CODECS)}.")
    if isinstance(memory_budget, (list, tuple)) and len(memory_budget) != workers:
        raise ValueError(f"HPSStrategy(memory_budget={memory_budget!r}): give one budget per "
                         f"worker ({workers}) or a single integer.")
    if round_tasks is None:
        assign, granule = batch_sizes("HPSStrategy", workers, global_batch, granularity,
                                      min_samples, memory_budget, alpha,
                                      round_batches), granularity or GRANULE
    else:
        if global_batch is not None or round_batches is not None:
            raise ValueError("HPSStrategy: give global_batch or round_batches (per-worker "
                             "batch sizes) or round_tasks (micro-batch shares), not both.")
        assign, granule = _shares(workers, round_tasks, min_tasks, memory_budget, alpha), None
    mode = "pipelined" if pipeline else "strict"
    # A sized task is its worker's whole share of the round: strict fp32 pushes it
    # straight into the PS accumulators, as BSP does; the per-worker buffer is there for
    # pipelining and for error feedback of lossy codecs (measured: ~15 ms per task).
    direct = granule is not None and not pipeline and codec == "fp32"
    if overlap and (pipeline or granule is None):
        raise ValueError("HPSStrategy(overlap=True) overlaps a round's apply with the next "
                         "round's tasks: use it with per-worker batch sizes and without "
                         "pipeline=True (which already makes updates one round old).")
    return EngineConfig(f"hps{'-pipelined' if pipeline else ''}{'-overlap' if overlap else ''}-{codec}",
                        sync=policies.AllTasks(overlap), assign=assign,
                        components=() if direct else (LocalAccumulation(mode),),
                        codec=codec, stall_timeout_s=stall_timeout_s, granule=granule,
                        granule_fixed=any(v is not None for v in (
                            granularity, global_batch, min_samples, memory_budget)),
                        global_batch=global_batch, round_batches=round_batches)


def _shares(workers, round_tasks, min_tasks, memory_budget, alpha):
    """The 0.2 mode: ``round_tasks`` one-micro-batch tasks shared in proportion to speed."""
    if not isinstance(round_tasks, int) or round_tasks < workers * min_tasks:
        raise ValueError(
            f"HPSStrategy(round_tasks={round_tasks!r}) with {workers} workers and "
            f"min_tasks={min_tasks}: need an integer >= {workers * min_tasks} (every worker "
            "takes at least min_tasks micro-batches per round).")
    if memory_budget is not None:
        total = (memory_budget * workers if isinstance(memory_budget, int)
                 else sum(memory_budget))
        if isinstance(total, int) and total < round_tasks:
            raise ValueError(
                f"HPSStrategy: the memory budgets add up to {total} micro-batches per round, "
                f"fewer than round_tasks={round_tasks}. Fix: raise memory_budget or lower "
                "round_tasks.")
    return policies.SpeedProportional(round_tasks, min_tasks, memory_budget, alpha)


def grouped(workers: int, *, groups=2, regroup_every: int = 10, lr_rule: str = "linear",
            staleness: str = "none", batch_sizes: bool = False, granularity: int | None = None,
            stall_timeout_s: float = 600.0) -> EngineConfig:
    """Grouped hybrid sync (arguments: :class:`~tf_hetero.strategies.grouped.GroupedSyncStrategy`).

    >>> grouped(4, groups=[[0, 1, 2], [3]]).grouping
    FixedGroups([[0, 1, 2], [3]])
    >>> grouped(4, groups=2, batch_sizes=True).name, grouped(4, batch_sizes=True).granule
    ('grouped2-sized', 8)
    >>> grouped(4, groups=5)
    Traceback (most recent call last):
    ...
    ValueError: GroupedSyncStrategy(groups=5) with 4 workers: need 1 to 4 groups.
    """
    if isinstance(groups, int) and not isinstance(groups, bool):
        if not 1 <= groups <= workers:
            raise ValueError(f"GroupedSyncStrategy(groups={groups}) with {workers} workers: "
                             f"need 1 to {workers} groups.")
        grouping = policies.SpeedGroups(groups, every=regroup_every)
        name = f"grouped{groups}"
    else:
        try:
            policies.group.normalize_groups(groups, workers)
        except ValueError as e:
            raise ValueError(f"GroupedSyncStrategy: {e}") from None
        grouping = policies.FixedGroups(groups)
        name = f"grouped-fixed{len(grouping.fixed)}"
    return _groups_config(name, grouping, lr_rule, staleness, batch_sizes, granularity,
                          stall_timeout_s, "GroupedSyncStrategy")


def _groups_config(name, grouping, lr_rule, staleness, sized, granularity, stall_timeout_s,
                   who) -> EngineConfig:
    """Grouped sync's rounds (grouped sync, CASP): one task per member, or with ``sized``
    the group's batches split across its members by speed (``BalancedBatches.for_group``)."""
    if not isinstance(sized, bool):
        raise ValueError(f"{who}(batch_sizes={sized!r}): use True or False.")
    assign, granule = policies.OnePerWorker(), None
    if sized:
        # workers only matters for a global_batch check, and grouped sync has none: a
        # group's batch is its members' dataset batches.
        assign, granule = batch_sizes(who, 1, None, granularity), granularity or GRANULE
        name += "-sized"
    return EngineConfig(name, sync=policies.AllTasks(), assign=assign, granule=granule,
                        granule_fixed=granularity is not None,
                        grouping=grouping, update_scale=policies.GroupScale(lr_rule, staleness),
                        stall_timeout_s=stall_timeout_s)


def dynsgd(workers: int, *, stall_timeout_s: float = 600.0) -> EngineConfig:
    """DynSGD (:class:`~tf_hetero.strategies.grouped.DynSGDStrategy`): one group per worker,
    each update divided by 1 + its staleness.

    >>> dynsgd(3).update_scale.scale(group_size=1, num_workers=3, staleness=1)
    0.5
    """
    return dataclasses.replace(
        grouped(workers, groups=[[w] for w in range(workers)], lr_rule="none",
                staleness="inverse", stall_timeout_s=stall_timeout_s), name="dynsgd")


def casp(workers: int, *, agent=None, decide_every: int = 10, greedy: bool = True,
         lr_rule: str = "linear", staleness: str = "none", batch_sizes: bool = False,
         granularity: int | None = None, stall_timeout_s: float = 600.0) -> EngineConfig:
    """CASP (arguments: :class:`~tf_hetero.strategies.casp.CASPStrategy`): grouped sync
    whose communities the agent of :mod:`tf_hetero.policies.community` decides.

    >>> casp(4).grouping
    CommunityGroups(every=10, max_k=4, greedy=True)
    """
    from tf_hetero.policies.community import CommunityGroups, shipped_weights

    if agent is None and batch_sizes is True:
        agent = shipped_weights(sized=True)  # trained on the communities it will form
    try:
        grouping = CommunityGroups(agent, every=decide_every, greedy=greedy)
    except ValueError as e:
        raise ValueError(f"CASPStrategy: {e}") from None
    return _groups_config("casp", grouping, lr_rule, staleness, batch_sizes, granularity,
                          stall_timeout_s, "CASPStrategy")


def auto(workers: int | None = None, *, granularity: int | None = None, settings=None,
         stall_timeout_s: float = 600.0) -> EngineConfig:
    """The adaptive strategy (:class:`~tf_hetero.strategies.auto.AutoStrategy`): one
    :class:`~tf_hetero.policies.auto.AutoController` is its sync policy (sized rounds or
    asynchronous steps), its assignment (the sized rounds' global batch), its update scale
    (the step's gain) and a component (the decisions).

    >>> c = auto(4)
    >>> c.sync is c.assign is c.update_scale is c.components[0], c.sync.mode, c.granule
    (True, 'rounds', 8)
    """
    from tf_hetero.policies.auto import AutoConfig, AutoController

    g = GRANULE if granularity is None else granularity
    if not isinstance(g, int) or isinstance(g, bool) or g < 1:
        raise ValueError(f"AutoStrategy(granularity={granularity!r}): need samples >= 1 "
                         "(e.g. 8).")
    if settings is not None and not isinstance(settings, AutoConfig):
        raise TypeError(f"AutoStrategy(settings={settings!r}): need a "
                        "tf_hetero.policies.auto.AutoConfig.")
    controller = AutoController(settings)
    cutoff = controller.config.cutoff
    # With a cut-off, a round's late shares are folded into a later one (EPSP's slack
    # sync), and the engine ticks so that a round closes at its cut-off with no task ending.
    components = (controller,) + ((LateFolding(policies.StalenessWeight(8)),) if cutoff else ())
    return EngineConfig("auto", sync=controller, assign=controller, granule=g,
                        granule_fixed=granularity is not None,
                        components=components, update_scale=controller,
                        tick_s=EPSP_TICK_S if cutoff else 0.0, stall_timeout_s=stall_timeout_s)
