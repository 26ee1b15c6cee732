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
   gradient is never applied (copies write separate accumulator lanes). A closure cannot be
   cancelled, so the beaten copy's worker sits the next enforced round out while it finishes.
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

from tf_hetero.strategies import config as configs
from tf_hetero.strategies.base import HeteroStrategy, num_workers

__all__ = ["EPSPStrategy"]

#: Seconds between engine ticks: how late a slack deadline or a transfer can fire.
TICK_S = configs.EPSP_TICK_S


class EPSPStrategy(HeteroStrategy):
    """Elastic-parallelism synchronous parallel (see the module docstring for each argument)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *, sync: str = "enforced",
                 round_tasks: int | None = None, global_batch: int | None = None,
                 round_batches: int | None = None,
                 granularity: int | None = None, straggler_factor: float = 1.5,
                 window: int = 8, probe_every: int = 8, transfer_factor: float | None = 1.5,
                 quorum: float = 0.75, deadline_factor: float = 2.0, late: str = "fold",
                 max_staleness: int = 8, stall_timeout_s: float = 600.0,
                 placement="round_robin", connect_timeout_s: float | None = None,
                 rebalance=None):
        configs.check_epsp_modes(sync, late)  # before the cluster is asked, as always
        workers = num_workers(cluster_resolver, "EPSPStrategy")
        config = configs.epsp(
            workers, sync=sync, round_tasks=round_tasks, global_batch=global_batch,
            round_batches=round_batches, granularity=granularity,
            straggler_factor=straggler_factor, window=window, probe_every=probe_every,
            transfer_factor=transfer_factor, quorum=quorum, deadline_factor=deadline_factor,
            late=late, max_staleness=max_staleness, stall_timeout_s=stall_timeout_s)
        super().__init__(cluster_resolver, variable_partitioner, config=config,
                         placement=placement, connect_timeout_s=connect_timeout_s,
                         rebalance=rebalance)
