"""Grouping policies: which workers train synchronously together, one *book* per group
(:class:`~tf_hetero.engine.api.GroupingPolicy`, asked with a
:class:`~tf_hetero.engine.api.GroupContext`; the groups are checked by
:func:`~tf_hetero.engine.api.normalize_groups`, both re-exported here; a group round's update
rule is in :mod:`tf_hetero.policies.scale`).

Grouped hybrid sync (Basu et al., HiPC 2018): each group runs its own rounds (one averaged
update per round) and the groups update the shared model asynchronously to each other, so a
straggler holds up only its own group. One group is BSP; one group per worker is ASP (or
DynSGD, with staleness-scaled updates).

>>> SpeedGroups(2).split({0: 0.1, 1: 0.11, 2: 0.1, 3: 0.4})
((0, 1, 2), (3,))
>>> FixedGroups([[0, 1], [2, 3]]).groups(GroupContext(live=(0, 1, 2, 3), current=None))
((0, 1), (2, 3))
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from tf_hetero.engine.api import GroupContext, Groups, normalize_groups
from tf_hetero.policies.estimate import DEFAULT_ALPHA, smoothed_time, unit_histories

__all__ = ["GroupContext", "FixedGroups", "SpeedGroups", "normalize_groups"]


class _Figures:
    """Monitor figures of a grouped run (``Monitor.add_summary``; Keras logs through
    ``MonitorLogs``): groups seen, and the staleness of the groups' updates."""

    def summary(self, rounds: Sequence, num_workers: int) -> dict:
        grouped = [r for r in rounds if "group" in r.info]
        if not grouped:
            return {}
        stale = [r.info.get("staleness", 0) for r in grouped]
        return {"groups_formed": len({tuple(r.info["group"]) for r in grouped}),
                "group_mean_staleness": sum(stale) / len(stale),
                "group_max_staleness": max(stale)}


class FixedGroups(_Figures):
    """Groups given by the user, never re-formed."""

    def __init__(self, groups: Sequence[Sequence[int]]):
        self.fixed = normalize_groups(groups)

    def groups(self, ctx: GroupContext) -> Groups | None:
        if ctx.current is None:
            return normalize_groups(self.fixed, ctx.num_workers or None)
        return None

    def __repr__(self):
        return f"FixedGroups({[list(g) for g in self.fixed]})"


class SpeedGroups(_Figures):
    """``k`` groups of workers of similar speed, re-formed when speeds change.

    Speeds are the smoothed task times of the monitor (the one estimator,
    :func:`~tf_hetero.policies.estimate.smoothed_time`). The split is the optimal 1-D k-means
    of the log task times (groups are contiguous in sorted order; dynamic programming, exact),
    so a 4x straggler ends up apart from 1x workers. Until every worker has ``warmup`` measured
    tasks the workers are grouped by index (0..N-1 cut into ``k`` runs). After that the
    policy proposes a new split at most every ``every`` applied rounds, and only if it
    differs from the current one and cuts the workers' idle time at their groups' barriers
    (:meth:`idle_fraction`) by at least ``min_gain`` (a fraction of all worker time):
    regrouping makes every group finish its round first (the engine regroups only with no
    round open or applying), so it should not flap.
    """

    def __init__(self, k: int, every: int = 10, min_gain: float = 0.1, warmup: int = 2,
                 alpha: float = DEFAULT_ALPHA):
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"groups={k!r}: need an integer >= 1 (or a list of groups).")
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"regroup_every={every!r}: need rounds >= 1.")
        self.k, self.every, self.min_gain, self.warmup, self.alpha = k, every, min_gain, warmup, alpha
        self._last = -math.inf  # rounds applied at the last proposal

    def groups(self, ctx: GroupContext) -> Groups | None:
        n = ctx.num_workers or len(ctx.live)
        if self.k > n:
            raise ValueError(f"groups={self.k} with {n} workers: need at most one group per "
                             "worker.")
        if ctx.current is None:
            return self.by_index(n)
        if ctx.rounds_applied - self._last < self.every or ctx.monitor is None:
            return None
        histories = unit_histories(ctx.monitor, n, self.warmup)
        if histories is None:
            return None
        times = {w: smoothed_time(h, self.alpha) for w, h in enumerate(histories)}
        self._last = ctx.rounds_applied
        proposal = self.split(times)
        if proposal == ctx.current:
            return None
        gain = self.idle_fraction(times, ctx.current) - self.idle_fraction(times, proposal)
        return proposal if gain >= self.min_gain else None

    def by_index(self, n: int) -> Groups:
        """Workers 0..n-1 cut into ``k`` runs of consecutive indices (nothing measured yet)."""
        bounds = [round(i * n / self.k) for i in range(self.k + 1)]
        return tuple(tuple(range(bounds[i], bounds[i + 1])) for i in range(self.k))

    @staticmethod
    def idle_fraction(times: Mapping[int, float], groups: Groups) -> float:
        """The share of the workers' time spent waiting at their group's barrier when each
        group's round lasts as long as its slowest member's task.

        >>> SpeedGroups.idle_fraction({0: 1.0, 1: 4.0}, ((0, 1),))
        0.375
        """
        slowest = [max(times[v] for v in g) for g in groups]  # once per group: O(N)
        idle = sum(1.0 - times[w] / top for g, top in zip(groups, slowest) for w in g)
        return idle / sum(len(g) for g in groups)

    def split(self, times: Mapping[int, float]) -> Groups:
        """The optimal split of the workers into ``k`` groups by log task time.

        Dynamic programming over the sorted log times, each candidate group's squared error
        from prefix sums (O(1) each, in extended precision: the sums' rounding stays far
        under the 1e-12 by which one split must beat another), the candidates for a group's
        last member compared at once: O(k N) vector steps (recomputing each candidate's
        error was O(k N^3) Python steps, 1.4 s a split at 256 workers). Among splits within
        1e-12 of the best, the earliest cut (workers of one speed stay in the earlier group)."""
        order = sorted(times, key=lambda w: (times[w], w))
        n, k = len(order), min(self.k, len(order))
        x = np.log(np.array([times[w] for w in order], dtype=np.longdouble))
        x -= x[n // 2]  # centred: smaller sums, smaller rounding
        s1 = np.concatenate(([0], np.cumsum(x)))
        s2 = np.concatenate(([0], np.cumsum(x * x)))
        best = np.full((k + 1, n + 1), np.inf, dtype=np.longdouble)
        best[0, 0] = 0
        cut = np.zeros((k + 1, n + 1), dtype=int)
        for g in range(1, k + 1):
            for j in range(g, n + 1):
                i = np.arange(g - 1, j)  # the group is order[i:j]
                sse = (s2[j] - s2[i]) - (s1[j] - s1[i]) ** 2 / (j - i)
                c = best[g - 1, g - 1:j] + sse
                pick = int(np.argmax(c <= c.min() + 1e-12))
                best[g, j], cut[g, j] = c[pick], g - 1 + pick
        groups, j = [], n
        for g in range(k, 0, -1):
            i = cut[g, j]
            groups.append(order[i:j])
            j = i
        return normalize_groups(groups)

    def __repr__(self):
        return f"SpeedGroups(k={self.k}, every={self.every}, min_gain={self.min_gain})"
