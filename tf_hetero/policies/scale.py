"""Update scales: how much a round's mean gradient counts in its apply
(:class:`~tf_hetero.engine.api.UpdateScale`; the engine sets ``Round.scale`` at the close).

- :class:`GroupScale`: grouped sync's per-group linear rule and DynSGD's 1 / (1 + staleness);
- :class:`SampledScale`: a round that closed before all its planned samples were in (EPSP
  slack sync at a quorum) takes a step in proportion to the samples it averages: the linear
  rule, per round.

>>> GroupScale("linear", "inverse").scale(group_size=2, num_workers=4, staleness=1)
0.25
>>> SampledScale().scale(group_size=4, num_workers=4, staleness=0, fraction=0.75)
0.75
"""

from __future__ import annotations

__all__ = ["GroupScale", "SampledScale"]


class GroupScale:
    """How much a group's round update counts: ``lr_rule`` ``"linear"`` scales the group's
    mean gradient by ``group size / workers`` (the learning rate is set for the whole
    cluster's batch, as for BSP; a smaller group's smaller batch takes a proportionally
    smaller step: the linear rule, per group); ``"none"`` applies it as is. ``staleness``
    ``"inverse"`` further divides by ``1 + s`` (DynSGD, Jiang et al. 2017), ``s`` the updates
    other groups applied since the round's tasks read the model.

    >>> GroupScale().scale(group_size=3, num_workers=4, staleness=2)
    0.75
    >>> GroupScale("none", "inverse").scale(group_size=1, num_workers=4, staleness=3)
    0.25
    """

    def __init__(self, lr_rule: str = "linear", staleness: str = "none"):
        if lr_rule not in ("linear", "none"):
            raise ValueError(f"lr_rule={lr_rule!r}: use 'linear' or 'none'.")
        if staleness not in ("none", "inverse"):
            raise ValueError(f"staleness={staleness!r}: use 'none' or 'inverse' (1 / (1 + s)).")
        self.lr_rule, self.staleness = lr_rule, staleness

    def scale(self, group_size: int, num_workers: int, staleness: float,
              fraction: float = 1.0) -> float:
        f = group_size / num_workers if self.lr_rule == "linear" else 1.0
        if self.staleness == "inverse":
            f /= 1.0 + max(staleness, 0)
        return f

    def __repr__(self):
        return f"GroupScale(lr_rule={self.lr_rule!r}, staleness={self.staleness!r})"


class SampledScale:
    """The round's step in proportion to the share of its planned samples it averages
    (``fraction``: units applied / units planned): the learning rate is set for the full
    round (BSP's global batch), and the linear rule says a batch of 3/4 of it takes 3/4 of
    the step (EPSP slack sync closes rounds at a quorum of their tasks)."""

    def scale(self, group_size: int, num_workers: int, staleness: float,
              fraction: float = 1.0) -> float:
        return min(max(fraction, 0.0), 1.0)

    def __repr__(self):
        return "SampledScale()"
