"""``EPSPStrategy``: elastic-parallelism synchronous parallel with task transfer (Falcon).

The Falcon paper (ICDCS'19) gives the ideas, not the algorithm; this is tf-hetero's design,
built from the round engine's policies (:mod:`tf_hetero.policies`) and components
(:mod:`tf_hetero.engine`):

1. **Straggler projection** (:class:`~tf_hetero.policies.StragglerProjection`): each
   worker's next task time is projected from its last ``window`` task times (median and
   spread, measured on the coordinator); a worker whose projection exceeds
   ``straggler_factor`` x the median projection is a straggler. Every round records the
   projection, the stragglers and the participants (``strategy.monitor.rounds[i].info``;
   per-epoch counts reach Keras logs / TensorBoard through :class:`tf_hetero.MonitorLogs`).
2. **Elastic parallelism** (:class:`~tf_hetero.policies.ElasticParallelism`): a round has
   a global batch (``global_batch`` samples or ``round_batches`` dataset batches; default
   BSP's, workers x the dataset batch) and one task
   per participating worker, sized in proportion to its measured speed in granules of
   ``granularity`` samples (:class:`~tf_hetero.policies.BalancedBatches`; each task reads
   its granules as one batch: one closure per worker per round). Under enforced sync a
   projected straggler sits the round out, so it does not set the round's critical path,
   and the "pioneers" take its share as extra samples in their one task; every
   ``probe_every``-th round it takes part again (with a share sized to its speed), and comes
   back for good once its projection improves. A round cut short by slack sync applies the
   tasks that are in (its update then averages fewer samples). With ``round_tasks=T``
   instead, the 0.2 behaviour: T one-micro-batch tasks *pulled* by the participants (fast
   workers take more of them, in several closures).
3. **Task transfer** (:class:`~tf_hetero.engine.TaskTransfer` with
   :class:`~tf_hetero.policies.TransferAfter`): when the round has no task
   left to hand out, an idle pioneer gets a copy of a task that has run ``transfer_factor`` x
   the typical projected task time; the first copy to finish wins and the other copy's
   gradient is never applied (copies write separate accumulator lanes).
4. **Enforced sync**: a round closes when all its tasks are in; with no stragglers this is
   large-batch SGD, exactly as BSP.
5. **Slack sync** (:class:`~tf_hetero.policies.SlackSync`): a round may close when
   ``quorum`` of its tasks are in, or when ``deadline_factor`` x its projected duration has
   passed. Stragglers keep taking part; their late gradients are folded into a later round's
   update with weight ``1 / (1 + staleness)`` (:class:`~tf_hetero.engine.LateFolding` with
   :class:`~tf_hetero.policies.StalenessWeight`;
   ``late="drop"`` drops them). A worker whose late gradient waits to be folded gets no task
   of a round that would overwrite it (at most one round).

>>> strategy = tf_hetero.EPSPStrategy(resolver, sync="slack")        # doctest: +SKIP
"""

from __future__ import annotations

from tf_hetero import policies
from tf_hetero.engine import LateFolding, TaskTransfer
from tf_hetero.strategies.base import EngineConfig, HeteroStrategy, batch_sizes, num_workers

__all__ = ["EPSPStrategy"]

#: Seconds between engine ticks: how late a slack deadline or a transfer can fire.
TICK_S = 0.005


class EPSPStrategy(HeteroStrategy):
    """Elastic-parallelism synchronous parallel (see the module docstring for each argument)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *, sync: str = "enforced",
                 round_tasks: int | None = None, global_batch: int | None = None,
                 round_batches: int | None = None,
                 granularity: int = 8, straggler_factor: float = 1.5,
                 window: int = 8, probe_every: int = 8, transfer_factor: float | None = 1.5,
                 quorum: float = 0.75, deadline_factor: float = 2.0, late: str = "fold",
                 max_staleness: int = 8, stall_timeout_s: float = 600.0):
        if sync not in ("enforced", "slack"):
            raise ValueError(f"EPSPStrategy(sync={sync!r}): use 'enforced' or 'slack'.")
        if late not in ("fold", "drop"):
            raise ValueError(f"EPSPStrategy(late={late!r}): use 'fold' or 'drop'.")
        workers = num_workers(cluster_resolver, "EPSPStrategy")
        batches, granule = None, None
        if round_tasks is None:  # per-worker batch sizes
            batches = batch_sizes("EPSPStrategy", workers, global_batch, granularity,
                                  round_batches=round_batches)
            granule, round_tasks = granularity, workers
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
        config = EngineConfig(
            f"epsp-{sync}",
            sync=slack_sync if slack else policies.AllTasks(),
            assign=policies.ElasticParallelism(round_tasks, projection, probe_every,
                                               keep_stragglers=slack, batches=batches),
            components=tuple(components), tick_s=TICK_S, stall_timeout_s=stall_timeout_s,
            granule=granule, global_batch=global_batch, round_batches=round_batches)
        super().__init__(cluster_resolver, variable_partitioner, config=config)
