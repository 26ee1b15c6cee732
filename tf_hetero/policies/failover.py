"""PS failover: what to keep so a fit survives a parameter server's death, and where the
dead task's variables go (pure; the TF glue is ``strategies/runtime/failover.py``).

The design (docs/FAILOVER.md): every ``every`` applied rounds the chief keeps an in-memory
copy of every PS variable (model, optimizer slots and step counter, metrics, tf-hetero's
accumulators), read right after a round's apply, when no task or apply writes them. When a
PS task dies, the dead task's variables are created again from the copy on a standby PS
(listed in TF_CONFIG, left out of :meth:`HeteroStrategy.scale_ps`'s active set) or, with
none, on the surviving PS with the least load; every surviving variable is rolled back to
the same copy, so the model is one consistent round, never a mix; the rounds applied since
the copy and the steps queued are lost and said so in one line.

>>> cfg = FailoverConfig(every=4)
>>> cfg.snapshot_due(applied=8), cfg.snapshot_due(applied=9)
(True, False)
>>> target(dead=1, num_ps=3, active=(0, 1), loads=[10.0, 8.0, 0.0])   # PS 2 stands by
2
>>> target(dead=1, num_ps=2, active=(0, 1), loads=[10.0, 8.0])        # no standby: PS 0
0
>>> target(dead=0, num_ps=1, active=(0,), loads=[1.0]) is None         # nowhere to go
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["FailoverConfig", "make", "target"]


@dataclass(frozen=True)
class FailoverConfig:
    """``every``: applied rounds between two copies (the most rounds a failover loses;
    each copy reads every PS variable to the chief once). ``detect_s``: the bound on a
    failover's wait for the work in flight when the PS died (then the fit fails with the
    clear error)."""

    every: int = 8
    detect_s: float = 30.0

    def __post_init__(self):
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"FailoverConfig(every={self.every!r}): give the applied rounds "
                             "between two copies of the PS variables as an int >= 1 (e.g. 8).")
        if not self.detect_s > 0:
            raise ValueError(f"FailoverConfig(detect_s={self.detect_s!r}): give a bound in "
                             "seconds > 0 (e.g. 30).")

    def snapshot_due(self, applied: int) -> bool:
        """Whether the copy is taken after the round that brings the applied count to
        ``applied``."""
        return applied % self.every == 0


def make(failover) -> FailoverConfig | None:
    """A strategy's ``failover=`` argument as a config: ``None``/``False`` (off), ``True``
    (the defaults), an int (``every``) or a :class:`FailoverConfig`.

    >>> make(True), make(3).every, make(None)
    (FailoverConfig(every=8, detect_s=30.0), 3, None)
    >>> make("often")
    Traceback (most recent call last):
    ...
    TypeError: failover='often': give True, an int (applied rounds between two copies) or a FailoverConfig.
    """
    if failover is None or failover is False:
        return None
    if failover is True:
        return FailoverConfig()
    if isinstance(failover, FailoverConfig):
        return failover
    if isinstance(failover, int):
        return FailoverConfig(every=failover)
    raise TypeError(f"failover={failover!r}: give True, an int (applied rounds between two "
                    "copies) or a FailoverConfig.")


def target(dead: int, num_ps: int, active: Sequence[int], loads: Sequence[float],
           lost: Sequence[int] = ()) -> int | None:
    """Where the variables of the dead PS task ``dead`` are created again: the lowest
    standby task (in the cluster, not in ``active``, not ``lost`` to an earlier death),
    else the surviving active task with the least load (``loads[p]``; ties: the lowest
    index), else ``None``.

    >>> target(dead=0, num_ps=3, active=(0, 2), loads=[5.0, 0.0, 5.0], lost=(1,))
    2
    """
    standby = [p for p in range(num_ps) if p != dead and p not in active and p not in lost]
    if standby:
        return standby[0]
    alive = [p for p in active if p != dead and p not in lost]
    if not alive:
        return None
    return min(alive, key=lambda p: (loads[p] if p < len(loads) else 0.0, p))
