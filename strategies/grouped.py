"""``GroupedSyncStrategy`` (grouped hybrid sync, Basu et al., HiPC 2018) and
``DynSGDStrategy`` (Jiang et al., SIGMOD 2017) on the round engine.

Grouped hybrid sync: the workers are split into groups; each group trains synchronously (its
own rounds: one task per member, one averaged update per round, as BSP within the group) and
the groups update the shared variables asynchronously to each other, so a straggler holds up
only its own group. One group is BSP exactly; one group per worker is asynchronous training.

- **Groups** (``groups=k``): ``k`` groups of similar speed, the optimal 1-D k-means of the
  workers' log task times (:class:`~tf_hetero.policies.SpeedGroups`), re-formed between rounds
  when speeds change: the engine stops opening rounds, lets every group's round be applied,
  then forms the new books, so no gradient is lost or applied twice. Until every worker has
  measured tasks, workers are grouped by index. ``groups=[[0, 1, 2], [3]]``: fixed groups.
- **Learning rate** (``lr_rule``): the optimizer's rate is set for the whole cluster's batch
  (N dataset batches, as for BSP); ``"linear"`` scales a group's update by its share of the
  workers (the linear rule per group: a group of n averages n batches); ``"none"`` applies
  each group's mean gradient as is.
- **Staleness** (``staleness="inverse"``): a group's update is divided by 1 + s, s the updates
  other groups applied since its tasks read the model (measured per round; the monitor
  records it per task, ``Round.info["staleness"]``).
- **Batch sizes inside a group** (``batch_sizes=True``, granules of ``granularity`` samples):
  a group's round still reads its members' dataset batches (group size x the dataset batch)
  but splits them across the members in proportion to their measured speed, as H-PS does for
  the whole cluster (:class:`~tf_hetero.policies.GroupBatches`), so a slower member of a
  group no longer sets the group's round; one group with ``batch_sizes=True`` is H-PS.
  Default ``False``: one dataset batch per member, as the paper's groups.

``DynSGDStrategy``: one group per worker and ``staleness="inverse"``, ``lr_rule="none"``:
asynchronous SGD whose updates are scaled by 1 / (1 + staleness). Each update is its own
apply (one extra closure per task), so it is slower per task than stock async training.

>>> strategy = tf_hetero.GroupedSyncStrategy(resolver, groups=2)        # doctest: +SKIP
"""

from __future__ import annotations

from tf_hetero.strategies import config as configs
from tf_hetero.strategies.base import HeteroStrategy, num_workers

__all__ = ["GroupedSyncStrategy", "DynSGDStrategy"]


class GroupedSyncStrategy(HeteroStrategy):
    """Grouped hybrid sync (see the module docstring for each argument)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *, groups=2,
                 regroup_every: int = 10, lr_rule: str = "linear", staleness: str = "none",
                 batch_sizes: bool = False, granularity: int | None = None,
                 stall_timeout_s: float = 600.0,
                 placement="round_robin", connect_timeout_s: float | None = None,
                 rebalance=None):
        workers = num_workers(cluster_resolver, "GroupedSyncStrategy")
        super().__init__(cluster_resolver, variable_partitioner, placement=placement,
                         connect_timeout_s=connect_timeout_s, rebalance=rebalance,
                         config=configs.grouped(workers, groups=groups,
                                                regroup_every=regroup_every, lr_rule=lr_rule,
                                                staleness=staleness, batch_sizes=batch_sizes,
                                                granularity=granularity,
                                                stall_timeout_s=stall_timeout_s))


class DynSGDStrategy(HeteroStrategy):
    """Asynchronous SGD with updates scaled by 1 / (1 + staleness) (DynSGD)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 stall_timeout_s: float = 600.0,
                 placement="round_robin", connect_timeout_s: float | None = None,
                 rebalance=None):
        workers = num_workers(cluster_resolver, "DynSGDStrategy")
        super().__init__(cluster_resolver, variable_partitioner, placement=placement,
                         connect_timeout_s=connect_timeout_s, rebalance=rebalance,
                         config=configs.dynsgd(workers, stall_timeout_s=stall_timeout_s))
