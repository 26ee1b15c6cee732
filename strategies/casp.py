"""``CASPStrategy``: community-aware synchronous parallel (after Petrel's CASP) on the round
engine.

Workers of similar speed form *communities*; each community trains synchronously (its own
rounds: one task per member, one averaged update per round) and the communities update the
shared variables asynchronously to each other, exactly as grouped hybrid sync
(:mod:`~tf_hetero.strategies.grouped`). What CASP adds is who decides the communities: a
small actor-critic agent (:class:`~tf_hetero.policies.community.CommunityGroups`), trained by
A3C in the simulator over a distribution of heterogeneity profiles and shipped with the
package (``tf_hetero/resources/casp_agent.npz``; ``python -m tf_hetero.tools.train_casp``
retrains it). Every ``decide_every`` applied updates it reads the monitor (per-worker task
times and their variance, the current communities, the achieved task rate, staleness) and
picks the number of communities ``k``; the workers sorted by speed are cut into ``k``
contiguous communities (exact 1-D k-means). Design, action space and its evaluation:
docs/CASP.md.

- ``agent``: path to an ``.npz`` of :class:`~tf_hetero.policies.community.ActorCritic`
  weights (default: the shipped agent; with ``batch_sizes=True`` the shipped agent trained
  on communities with per-member batch sizes, ``casp_agent_sized.npz``, ``train_casp train
  --sized``).
- ``decide_every``: applied updates between the agent's decisions; ``greedy``: its most
  probable ``k`` (else sampled).
- ``lr_rule``, ``staleness``: each community's update rule, and ``batch_sizes``,
  ``granularity``: per-member batch sizes inside a community, as for
  :class:`~tf_hetero.strategies.grouped.GroupedSyncStrategy`; ``placement``,
  ``connect_timeout_s``: as for :class:`~tf_hetero.strategies.base.HeteroStrategy`.
- ``strategy.groups``: the current communities; ``strategy.decisions``: the agent's
  decisions (updates applied, k, the communities it formed or ``None``). The monitor's
  summary (Keras logs through ``MonitorLogs``) carries ``casp_k`` and ``casp_mean_k``;
  every round's ``info["group"]`` its community.

>>> strategy = tf_hetero.CASPStrategy(resolver)                  # doctest: +SKIP
"""

from __future__ import annotations

from tf_hetero.strategies import config as configs
from tf_hetero.strategies.base import HeteroStrategy, num_workers

__all__ = ["CASPStrategy"]


class CASPStrategy(HeteroStrategy):
    """Community-aware synchronous parallel (see the module docstring for each argument)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *, agent=None,
                 decide_every: int = 10, greedy: bool = True, lr_rule: str = "linear",
                 staleness: str = "none", batch_sizes: bool = False, granularity: int | None = None,
                 stall_timeout_s: float = 600.0,
                 placement="round_robin", connect_timeout_s: float | None = None,
                 rebalance=None):
        workers = num_workers(cluster_resolver, "CASPStrategy")
        super().__init__(cluster_resolver, variable_partitioner, placement=placement,
                         connect_timeout_s=connect_timeout_s, rebalance=rebalance,
                         config=configs.casp(workers, agent=agent, decide_every=decide_every,
                                             greedy=greedy, lr_rule=lr_rule,
                                             staleness=staleness, batch_sizes=batch_sizes,
                                             granularity=granularity,
                                             stall_timeout_s=stall_timeout_s))

    @property
    def decisions(self) -> list:
        """The agent's decisions: (updates applied, k, communities formed or ``None``)."""
        return list(self.config.grouping.decisions)
