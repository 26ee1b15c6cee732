"""Task-transfer policies: when is a running task copied to an idle worker?
(:class:`~tf_hetero.engine.api.TransferPolicy`)

>>> TransferAfter(1.5).should_transfer(0.2, 0.1), TransferAfter(1.5).should_transfer(0.1, 0.1)
(True, False)
"""

from __future__ import annotations

import math

__all__ = ["TransferAfter"]


class TransferAfter:
    """Task transfer: re-issue a task once it has run ``factor`` x the typical (median)
    projected task time of the round's workers."""

    def __init__(self, factor: float = 1.5):
        if not factor > 1:
            raise ValueError(f"factor={factor!r}: need a number > 1.")
        self.factor = factor

    def should_transfer(self, elapsed_s: float, typical_s: float) -> bool:
        return not math.isnan(typical_s) and elapsed_s > self.factor * typical_s

    def __repr__(self):
        return f"TransferAfter(factor={self.factor})"
