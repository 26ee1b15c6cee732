"""Variable placement across PS tasks: TensorFlow's round-robin, or load-balanced.

TensorFlow's ``ParameterServerStrategy`` puts the ``k``-th variable it creates on PS
``k mod num_ps`` whatever its size: a model whose first kernel is large puts most bytes on one
PS (the digits MLP on 2 PS: 68,096 of 68,904 bytes on PS 0), and that PS serves most of every
step's reads and pushes. ``placement="balanced"`` (an option of every tf-hetero strategy)
places each variable, as it is created, on the PS with the least *load per unit of service
rate* after taking it:

    choose p minimizing (load_p + w) / rate_p,     w = bytes x accesses per step

A trainable variable is read and its gradient pushed once per step (2 accesses), others only
read (1). ``rate_p`` is the PS's relative service rate: equal, or from a profile's ``ps_mbps``/
``ps_slow`` (:mod:`tf_hetero.emulation.profile`), so a 3x slower PS is given a third of the
load. Variables arrive one at a time (tf_keras creates them layer by layer), so the online
rule is list scheduling. With ``Balanced(model_fn=build)`` the strategy first builds the model
in a throwaway graph (shapes only, nothing on the cluster), splits its variables the way the
strategy's ``variable_partitioner`` will, and plans them largest first (LPT, :func:`pack`);
variables then created in the same order with the same sizes take their planned PS, any
other goes by the online rule. A variable larger than a fair share cannot be balanced whole:
give the strategy a ``variable_partitioner`` (e.g.
``tf.distribute.experimental.partitioners.MinSizePartitioner``) and each shard is placed on its
own.

This module is pure Python; ``strategies/runtime/placement.py`` applies it at variable
creation (``HeteroExtended._create_variable_round_robin``).

>>> b = Balanced()
>>> b.bind(2)
>>> [b.place(n) for n in (32768, 512, 32768, 256, 2560, 40)]   # the digits MLP's kernels and biases
[0, 1, 1, 0, 0, 1]
>>> b.bytes, round(max_over_mean(b.loads), 3)
([35584, 33320], 1.033)
>>> r = RoundRobin(); r.bind(2)
>>> [r.place(n) for n in (32768, 512, 32768, 256, 2560, 40)]
[0, 1, 0, 1, 0, 1]
>>> r.bytes, round(max_over_mean(r.loads), 3)
([68096, 808], 1.977)
"""

from __future__ import annotations

import re
from typing import Sequence

__all__ = ["Placement", "RoundRobin", "Balanced", "make", "pack", "max_over_mean", "PLACEMENTS",
           "parse_active", "ps_index"]

#: The names ``placement=`` accepts.
PLACEMENTS = ("round_robin", "balanced")


_PS_TASK = re.compile(r"/job:ps/(?:replica:\d+/)?task:(\d+)")


def ps_index(device: str) -> int | None:
    """The PS task a device string names, or ``None``.

    >>> ps_index("/job:ps/replica:0/task:1/device:CPU:0"), ps_index("/job:worker/task:0")
    (1, None)
    """
    m = _PS_TASK.search(device or "")
    return int(m.group(1)) if m else None


def max_over_mean(loads: Sequence[float]) -> float | None:
    """Largest load over the mean load (1.0: perfectly even; ``None`` if there is no load).

    >>> max_over_mean([3, 1]), max_over_mean([0, 0])
    (1.5, None)
    """
    loads = list(loads)
    mean = sum(loads) / len(loads) if loads else 0.0
    return max(loads) / mean if mean > 0 else None


def parse_active(active, num_ps: int, who: str = "scale_ps") -> tuple[int, ...]:
    """The PS tasks ``active`` names: a count ``n`` (tasks 0..n-1) or a list of indices.

    >>> parse_active(2, 3), parse_active([2, 0], 3)
    ((0, 1), (0, 2))
    >>> parse_active(3, 2)
    Traceback (most recent call last):
    ...
    ValueError: scale_ps(3): this cluster lists 2 PS tasks (TF_CONFIG "ps"), and TensorFlow cannot add a task to a running cluster. Fix: list every PS task you may scale to in TF_CONFIG, start with scale_ps(k) for k of them and scale up to 2 (docs/PSLD.md section 5).
    """
    wrong = TypeError(f"{who}({active!r}): give a number of PS tasks or a list of PS task "
                      "indices.")
    if isinstance(active, bool):
        raise wrong
    if hasattr(active, "__index__"):  # int, numpy integer
        shown = int(active)
        chosen = tuple(range(shown)) if 1 <= shown <= num_ps else None
    else:
        try:
            shown = [int(p) for p in active]
        except (TypeError, ValueError):
            raise wrong from None
        chosen = tuple(sorted(set(shown)))
        if not chosen or any(not 0 <= p < num_ps for p in chosen):
            chosen = None
    if chosen is None:
        raise ValueError(
            f"{who}({shown}): this cluster lists {num_ps} PS tasks (TF_CONFIG \"ps\"), and "
            "TensorFlow cannot add a task to a running cluster. Fix: list every PS task you "
            "may scale to in TF_CONFIG, start with scale_ps(k) for k of them and scale up to "
            f"{num_ps} (docs/PSLD.md section 5).")
    return chosen


class Placement:
    """Chooses the PS task of each variable as it is created, and keeps the loads.

    ``loads[p]`` is the bytes PS ``p`` moves per training step for the variables placed so
    far (bytes x accesses per step). Subclasses implement :meth:`choose`.
    """

    name = "placement"

    def __init__(self):
        self.num_ps = 0
        self.loads: list[float] = []
        self.bytes: list[int] = []  # bytes held (each variable once)
        self.placed: list[tuple[str, int, int]] = []  # (name, PS, bytes) in creation order

    def bind(self, num_ps: int, rates: Sequence[float] | None = None) -> None:
        """Called once the cluster is known: its PS tasks, and their relative service rates
        as the strategy found them (its profile; ``None``: not known). Round-robin ignores the
        rates."""
        if num_ps < 1:
            raise ValueError(f"{type(self).__name__}: a placement needs at least one PS task; "
                             f"the cluster has {num_ps}. Fix: list PS tasks in TF_CONFIG.")
        self.num_ps = num_ps
        self.loads = [0] * num_ps
        self.bytes = [0] * num_ps
        self.active = tuple(range(num_ps))

    def set_active(self, active: Sequence[int]) -> None:
        """Only the PS tasks in ``active`` take new variables (elastic scaling: the others
        stand by). With all of them, TensorFlow's round-robin is left alone.

        >>> r = RoundRobin(); r.bind(2); r.set_active([0])
        >>> [r.place(n) for n in (8, 4, 2)], r.bytes
        ([0, 0, 0], [14, 0])
        >>> b = Balanced(); b.bind(3); b.set_active([1, 2])
        >>> [b.place(n) for n in (8, 4, 2)]
        [1, 2, 2]
        """
        self.active = tuple(sorted(set(int(p) for p in active)))

    def choose(self, nbytes: int, accesses: int = 2) -> int | None:
        """The PS for a new variable of ``nbytes`` (``None``: TensorFlow's round-robin)."""
        raise NotImplementedError

    def record(self, ps: int, nbytes: int, accesses: int = 2, name: str = "") -> None:
        """A variable of ``nbytes`` landed on PS ``ps``."""
        if ps is None or not 0 <= ps < self.num_ps:
            return
        self.loads[ps] += nbytes * accesses
        self.bytes[ps] += nbytes
        self.placed.append((name, ps, nbytes))

    def move(self, name: str, src: int, dst: int, nbytes: int, accesses: int = 2) -> None:
        """A variable of ``nbytes`` named ``name`` moved from PS ``src`` to ``dst`` (live
        rebalancing): the loads and the record follow it.

        >>> r = RoundRobin(); r.bind(2); _ = [r.place(n, name=k) for k, n in (("a", 8), ("b", 4))]
        >>> r.move("a", 0, 1, 8); r.bytes, r.loads, r.placed
        ([0, 12], [0, 24], [('a', 1, 8), ('b', 1, 4)])
        """
        self.loads[src] -= nbytes * accesses
        self.loads[dst] += nbytes * accesses
        self.bytes[src] -= nbytes
        self.bytes[dst] += nbytes
        for i in range(len(self.placed) - 1, -1, -1):
            if self.placed[i][0] == name and self.placed[i][1] == src:
                self.placed[i] = (name, dst, self.placed[i][2])
                break

    def place(self, nbytes: int, accesses: int = 2, name: str = "") -> int:
        """:meth:`choose` then :meth:`record` (the pure path; TF records the real device)."""
        ps = self.choose(nbytes, accesses)
        ps = self._next_round_robin() if ps is None else ps
        self.record(ps, nbytes, accesses, name)
        return ps

    def _next_round_robin(self) -> int:
        return len(self.placed) % self.num_ps

    def __repr__(self):
        return f"{type(self).__name__}()"


class RoundRobin(Placement):
    """TensorFlow's rule, unchanged: the k-th variable on PS k mod num_ps (the default)."""

    name = "round_robin"

    def choose(self, nbytes: int, accesses: int = 2) -> int | None:
        if len(self.active) == self.num_ps:
            return None  # TensorFlow's own rule
        return self.active[len(self.placed) % len(self.active)]


class Balanced(Placement):
    """Each variable to the PS with the least load per service rate after taking it.

    Args:
      rates: relative service rate of each PS (higher is faster), e.g. ``(1, 1/3)`` when PS 1
        is 3x slower. Default: the rates the strategy gives :meth:`bind`, from ``profile`` or
        else the profile ``tf-hetero run --profile`` exported (``TF_HETERO_PROFILE``'s
        ``ps_mbps``/``ps_slow``); equal without one.
      profile: a profile (spec, dict or :class:`~tf_hetero.emulation.profile.Profile`) the
        strategy takes the rates from instead of the exported one.

    >>> b = Balanced(rates=(1, 1 / 3)); b.bind(2)
    >>> [b.place(n) for n in (300, 100, 100, 100)]   # the slow PS gets a quarter of the bytes
    [0, 1, 0, 0]
    """

    name = "balanced"

    def __init__(self, rates: Sequence[float] | None = None, profile=None, model_fn=None):
        super().__init__()
        #: Builds the model (called once in a throwaway graph to learn the sizes; TF glue).
        self.model_fn = model_fn
        self._plan: list[tuple[int, int, int]] = []  # (bytes, accesses, PS), creation order
        self._next = 0
        if rates is not None and (not rates or any(not r > 0 for r in rates)):
            raise ValueError(f"Balanced(rates={tuple(rates)!r}): every rate must be > 0 "
                             "(relative service rates, e.g. (1, 1/3) when PS 1 is 3x slower).")
        self._rates = tuple(float(r) for r in rates) if rates is not None else None
        #: Where the strategy takes the rates from when ``rates`` is not given (its glue parses
        #: it: this module reads no profile and no environment).
        self.profile = profile
        self.rates: tuple[float, ...] = ()

    def bind(self, num_ps: int, rates: Sequence[float] | None = None) -> None:
        super().bind(num_ps)
        rates = self._rates if self._rates is not None else rates
        if rates is None:
            rates = (1.0,) * num_ps
        if len(rates) != num_ps:
            raise ValueError(f"Balanced(rates={rates!r}) gives {len(rates)} rates but the "
                             f"cluster has {num_ps} PS tasks. Fix: give one rate per PS.")
        self.rates = tuple(rates)

    def set_plan(self, units: Sequence[tuple[int, int]]) -> list[int]:
        """Plans ``units`` (``(bytes, accesses)`` in creation order) largest first; returns
        their PS tasks. Call after :meth:`bind`.

        An embedding in 16 shards of 4 KB created before whole dense kernels of 8 KB and 5 KB:
        online, the shards spread evenly and the kernels land on top (max/mean 1.238 on 4 PS);
        planned, the kernels go first and the shards fill around them:

        >>> units = [(4096, 2)] * 16 + [(8192, 2), (512, 2), (5120, 2), (40, 2)]
        >>> b = Balanced(); b.bind(4); _ = b.set_plan(units)
        >>> _ = [b.place(n) for n, _ in units]
        >>> b.bytes, round(max_over_mean(b.loads), 3)
        ([20480, 17960, 20480, 20480], 1.032)
        """
        ps = pack([n * a for n, a in units], self.num_ps, self.rates)
        self._plan = [(n, a, p) for (n, a), p in zip(units, ps)]
        self._next = 0
        return ps

    def choose(self, nbytes: int, accesses: int = 2) -> int:
        if self._next < len(self._plan):
            n, a, p = self._plan[self._next]
            # The planned variable, in its planned order, on a PS still in use.
            if (n, a) == (nbytes, accesses) and p in self.active:
                self._next += 1
                return p
        w = nbytes * accesses
        # Ties go to the lowest index, so a placement is reproducible run to run.
        return min(self.active, key=lambda p: ((self.loads[p] + w) / self.rates[p], p))

    def __repr__(self):
        return f"Balanced(rates={self._rates!r})"


def make(placement: "str | Placement | None") -> Placement:
    """A fresh :class:`Placement` from ``placement=`` (a name or an instance).

    >>> make("balanced"), make(None)
    (Balanced(rates=None), RoundRobin())
    >>> make("even")
    Traceback (most recent call last):
    ...
    ValueError: placement='even' is not a placement. Fix: use 'round_robin' (TensorFlow's rule, the default) or 'balanced' (tf_hetero.policies.placement.Balanced), or pass a tf_hetero.policies.placement.Placement.
    """
    if placement is None or placement == "round_robin":
        return RoundRobin()
    if placement == "balanced":
        return Balanced()
    if isinstance(placement, Placement):
        return placement
    raise ValueError(
        f"placement={placement!r} is not a placement. Fix: use 'round_robin' (TensorFlow's "
        "rule, the default) or 'balanced' (tf_hetero.policies.placement.Balanced), or pass a "
        "tf_hetero.policies.placement.Placement.")


def pack(sizes: Sequence[float], num_ps: int, rates: Sequence[float] | None = None) -> list[int]:
    """Offline greedy bin packing (LPT): largest first, each to the PS with the least load per
    rate after taking it. Returns the PS of each size, in the input order.

    >>> pack([1, 5, 2, 2, 1], 2)
    [1, 0, 1, 1, 0]
    """
    rates = tuple(rates) if rates is not None else (1.0,) * num_ps
    loads = [0.0] * num_ps
    out = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        p = min(range(num_ps), key=lambda p: ((loads[p] + sizes[i]) / rates[p], p))
        loads[p] += sizes[i]
        out[i] = p
    return out
