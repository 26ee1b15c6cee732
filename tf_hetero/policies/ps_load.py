"""The load model of rebalancing: units on PS tasks, each PS's load per service rate, the
move that lowers the largest one, and the moves an undo bars for a while (:class:`Tabu`)
(pure).

A *unit* is a variable or a shard that can move, given as ``name -> (PS, load)``: the PS it
is on and the bytes it moves per step (bytes x accesses). A PS's load is the sum of its
units'; weighed by its service rate (:mod:`tf_hetero.policies.ps_rates`) the largest load
per rate is the bottleneck the controller lowers
(:class:`~tf_hetero.policies.rebalance.RebalanceController`).

>>> units = {"a": (0, 300), "b": (0, 100), "c": (1, 100)}
>>> ps_loads(units, 2)
[400.0, 100.0]
>>> best_move(units, (1.0, 1.0), candidates(units, active=(0, 1)))
Move(unit='b', src=0, dst=1)
"""

from __future__ import annotations

import dataclasses
from typing import Collection, Mapping, Sequence

__all__ = ["Move", "Units", "Tabu", "ps_loads", "candidates", "best_move", "evacuate", "gap",
           "saving", "probed_service"]

#: name -> ``(PS, load)``: where each movable unit is and the bytes it moves per step.
Units = Mapping[str, tuple[int, float]]


@dataclasses.dataclass(frozen=True)
class Move:
    """Move ``unit`` (a variable or shard, by name) from PS ``src`` to PS ``dst``."""

    unit: str
    src: int
    dst: int

    def reverse(self) -> "Move":
        return Move(self.unit, self.dst, self.src)


def ps_loads(units: Units, num_ps: int) -> list[float]:
    """Load on each PS: the sum of its units' loads.

    >>> ps_loads({"a": (0, 300), "b": (1, 100), "c": (0, 50)}, 3)
    [350.0, 100.0, 0.0]
    """
    loads = [0.0] * num_ps
    for ps, load in units.values():
        loads[ps] += load
    return loads


def candidates(units: Units, active: Sequence[int],
               barred: Collection[tuple[str, int]] = ()) -> list[tuple[str, int, float, int]]:
    """Every move allowed: ``(name, from PS, load, to PS)`` of each unit with a load to each
    other active PS, the ``barred`` ``(name, to PS)`` pairs left out, in name order.

    >>> candidates({"a": (0, 300), "z": (1, 0)}, (0, 1, 2), barred={("a", 2)})
    [('a', 0, 300, 1)]
    """
    return [(name, ps, load, dst) for name, (ps, load) in sorted(units.items())
            for dst in active if dst != ps and load > 0 and (name, dst) not in barred]


def best_move(units: Units, rates: Sequence[float],
              allowed: Sequence[tuple[str, int, float, int]]) -> Move | None:
    """Of the ``allowed`` moves (:func:`candidates`), the one that minimizes the largest
    load per rate afterwards (ties: by name, then target PS), or ``None`` if none lowers it.

    >>> best_move({"a": (0, 300), "b": (1, 100)}, (1.0, 1.0),
    ...           candidates({"a": (0, 300), "b": (1, 100)}, (0, 1))) is None   # already best
    True
    >>> units = {"a": (0, 300), "b": (0, 100)}
    >>> best_move(units, (1.0, 1 / 3), candidates(units, (0, 1)))    # PS 1 3x slower
    Move(unit='b', src=0, dst=1)
    """
    if not allowed:
        return None
    loads = ps_loads(units, len(rates))

    def worst_after(c):
        name, ps, load, dst = c
        after = list(loads)
        after[ps] -= load
        after[dst] += load
        return max(a / r for a, r in zip(after, rates))

    now = max(a / r for a, r in zip(loads, rates))
    best = min(allowed, key=lambda c: (worst_after(c), c[0], c[3]))
    if worst_after(best) >= now * (1 - 1e-9):
        return None
    return Move(best[0], best[1], best[3])


def evacuate(units: dict, active: Sequence[int], rates: Sequence[float]) -> list[Move]:
    """Moves every unit off the PS tasks not in ``active``, largest first, each to the active
    PS with the least load per rate after taking it; ``units`` follows them.

    >>> units = {"k0": (1, 6000), "k1": (0, 6000), "b": (1, 100)}
    >>> evacuate(units, (0, 2), (1.0, 1.0, 1.0)), units["k0"]
    ([Move(unit='k0', src=1, dst=2), Move(unit='b', src=1, dst=0)], (2, 6000))
    """
    loads = ps_loads(units, len(rates))
    moves = []
    leaving = [(name, ps, load) for name, (ps, load) in units.items() if ps not in active]
    for name, ps, load in sorted(leaving, key=lambda u: (-u[2], u[0])):
        dst = min(active, key=lambda p: ((loads[p] + load) / rates[p], p))
        loads[ps] -= load
        loads[dst] += load
        units[name] = (dst, load)
        moves.append(Move(name, ps, dst))
    return moves


def gap(units: Units, rates: Sequence[float],
        active: Sequence[int]) -> tuple[float | None, str | None]:
    """How far ``units`` (placed as given) are from an even spread of their load over the
    ``active`` PS tasks at ``rates``: the largest load per rate over the total load per
    total rate (1.0: even; ``None``: no load), and the largest unit's name. Whole variables
    can be placed no closer than their sizes allow; a ratio well above 1 after the greedy
    moves says the units are too coarse (give the strategy a ``variable_partitioner``:
    shards are placed and moved one by one).

    >>> units = {"k0": (0, 64000), "k1": (1, 64000), "b": (1, 800)}
    >>> g, largest = gap(units, (1.0, 1.0), (0, 1))     # two equal kernels: even
    >>> round(g, 3), largest
    (1.006, 'k0')
    >>> round(gap({"k0": (0, 128000), "b": (1, 800)}, (1.0, 1 / 3), (0, 1))[0], 3)
    1.325
    """
    loads = ps_loads(units, len(rates))
    total = sum(loads[p] for p in active)
    if not units or total <= 0:
        return None, None
    even = total / sum(rates[p] for p in active)
    worst = max(loads[p] / rates[p] for p in active)
    largest = max(units, key=lambda name: units[name][1])  # the first of equals
    return worst / even, largest


def saving(before: Units, after: Units, rates: Sequence[float], mean_s: float,
           busy_s: Sequence[float] | None, rounds: int) -> float:
    """Estimated seconds per round the placement ``after`` saves over ``before``: the
    bottleneck PS's busy seconds per round (measured over ``rounds``; the whole round
    ``mean_s`` when not) times the relative drop of the largest load per rate.

    >>> saving({"a": (0, 300), "b": (0, 100)}, {"a": (0, 300), "b": (1, 100)},
    ...        (1.0, 1.0), 0.5, busy_s=[0.8, 0.0], rounds=4)    # 0.2 s a round x 1/4
    0.05
    """
    num_ps = len(rates)

    def worst(placement):
        per_rate = [a / r for a, r in zip(ps_loads(placement, num_ps), rates)]
        top = max(range(num_ps), key=lambda p: per_rate[p])
        return per_rate[top], top

    now, top = worst(before)
    later, _ = worst(after)
    if now <= 0:
        return 0.0
    busy = (busy_s[top] / rounds if busy_s is not None and len(busy_s) == num_ps
            and rounds else mean_s)
    return max(0.0, busy * (1 - later / now))


def probed_service(units: Units, probed: Sequence) -> float:
    """The bottleneck PS's probed seconds per step: per PS, its load x seconds per byte,
    plus two requests if it holds anything (``probed``: per PS, ``(seconds per byte,
    seconds per request)``).

    >>> probed_service({"k": (1, 64000), "b": (0, 800)}, [(0.25e-6, 1e-3), (0.75e-6, 1e-3)])
    0.05
    """
    return max(load * float(p[0]) + (2 * p[1] if load > 0 else 0.0)
               for load, p in zip(ps_loads(units, len(probed)), probed))


class Tabu:
    """``(unit, PS)`` pairs an undo bars from proposals: ``retry_after`` decisions, twice as
    long for each earlier undo of the same pair.

    >>> t = Tabu(retry_after=2)
    >>> t.ban(("b", 1), now=1); t.barred(now=2), t.barred(now=3)
    ({('b', 1)}, set())
    >>> t.ban(("b", 1), now=3); t.barred(now=6)   # undone a second time: 4 decisions
    {('b', 1)}
    """

    def __init__(self, retry_after: int):
        self.retry_after = retry_after
        self._until: dict[tuple[str, int], int] = {}  # pair -> decision it expires
        self._undos: dict[tuple[str, int], int] = {}  # pair -> times undone

    def ban(self, pair: tuple[str, int], now: int) -> None:
        self._undos[pair] = self._undos.get(pair, 0) + 1
        self._until[pair] = now + self.retry_after * 2 ** (self._undos[pair] - 1)

    def barred(self, now: int) -> set[tuple[str, int]]:
        return {pair for pair, until in self._until.items() if until > now}
