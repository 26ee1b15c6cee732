"""The baseline strategies: ASP, BSP, backup workers, SSP.

- :class:`ASPStrategy` -- asynchronous, each task applied at once, as stock TF does (plus the
  monitor).
- :class:`BSPStrategy` -- one task per worker per round; the round waits for all; the round's
  mean gradient is applied once (numerically one step on the concatenated batch).
- :class:`BackupWorkerStrategy` (``backups=b``) -- a round applies the first N-b tasks in and
  drops the rest (Chen et al. 2016, "Revisiting distributed synchronous SGD").
- :class:`SSPStrategy` (``staleness=s``) -- asynchronous, but no worker gets more than ``s``
  tasks ahead of the slowest live worker (Ho et al. 2013). Each task is applied by the chief,
  exactly once even when TF re-runs it after a worker failure.

In the synchronous strategies one ``model.fit`` step is one micro-batch; a round of N tasks
applies one update, so ``optimizer.iterations`` counts rounds and the global batch of a round
is N x the dataset's batch size. At the end of an epoch a round may have fewer tasks.

>>> issubclass(BSPStrategy, HeteroStrategy) and ASP is ASPStrategy
True
"""

from __future__ import annotations

from tf_hetero.strategies import config as configs
from tf_hetero.strategies.base import HeteroStrategy, num_workers

__all__ = ["ASPStrategy", "ASP", "BSPStrategy", "BackupWorkerStrategy", "SSPStrategy"]


class ASPStrategy(HeteroStrategy):
    """Asynchronous parallel: every task applied at once (stock TF behaviour, monitored)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 stall_timeout_s: float = 600.0,
                 placement="round_robin", connect_timeout_s: float | None = None,
                 rebalance=None):
        super().__init__(cluster_resolver, variable_partitioner, placement=placement,
                         connect_timeout_s=connect_timeout_s, rebalance=rebalance,
                         config=configs.asp(stall_timeout_s=stall_timeout_s))


#: The name before 0.2 (kept one release).
ASP = ASPStrategy


class BSPStrategy(HeteroStrategy):
    """Bulk synchronous parallel: one task per worker per round, the round waits for all."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 stall_timeout_s: float = 600.0,
                 placement="round_robin", connect_timeout_s: float | None = None,
                 rebalance=None):
        super().__init__(cluster_resolver, variable_partitioner, placement=placement,
                         connect_timeout_s=connect_timeout_s, rebalance=rebalance,
                         config=configs.bsp(stall_timeout_s=stall_timeout_s))


class BackupWorkerStrategy(HeteroStrategy):
    """Synchronous with backup workers: apply the first N-``backups`` tasks of each round."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *, backups: int = 1,
                 stall_timeout_s: float = 600.0,
                 placement="round_robin", connect_timeout_s: float | None = None,
                 rebalance=None):
        workers = num_workers(cluster_resolver, "BackupWorkerStrategy")
        super().__init__(cluster_resolver, variable_partitioner, placement=placement,
                         connect_timeout_s=connect_timeout_s, rebalance=rebalance,
                         config=configs.backup(workers, backups, stall_timeout_s))
        self.backups = backups


class SSPStrategy(HeteroStrategy):
    """Stale synchronous parallel: async, no worker more than ``staleness`` tasks ahead."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *, staleness: int = 3,
                 stall_timeout_s: float = 600.0,
                 placement="round_robin", connect_timeout_s: float | None = None,
                 rebalance=None):
        workers = num_workers(cluster_resolver, "SSPStrategy")
        super().__init__(cluster_resolver, variable_partitioner, placement=placement,
                         connect_timeout_s=connect_timeout_s, rebalance=rebalance,
                         config=configs.ssp(workers, staleness=staleness,
                                            stall_timeout_s=stall_timeout_s))
        self.staleness = staleness
