"""Late-gradient policies: the weight of a gradient folded into a later round
(:class:`~tf_hetero.engine.api.LatePolicy`).

>>> w = StalenessWeight(max_staleness=2)
>>> w.weight(1), w.weight(3)
(0.5, 0.0)
"""

from __future__ import annotations

__all__ = ["StalenessWeight"]


class StalenessWeight:
    """Late gradients folded into a later round, weighted ``1 / (1 + staleness) ** power``;
    later than ``max_staleness`` rounds they are dropped (weight 0)."""

    def __init__(self, max_staleness: int = 8, power: float = 1.0):
        if not isinstance(max_staleness, int) or max_staleness < 1:
            raise ValueError(f"max_staleness={max_staleness!r}: need an integer >= 1.")
        self.max_staleness, self.power = max_staleness, power

    def weight(self, staleness: int) -> float:
        return 0.0 if staleness > self.max_staleness else 1.0 / (1.0 + staleness) ** self.power

    def __repr__(self):
        return f"StalenessWeight(max_staleness={self.max_staleness}, power={self.power})"
