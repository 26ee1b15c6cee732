"""The configuration of ``tf-hetero bench`` (and of the demo's comparison and ``tf-hetero
sim``, which take the bench's): :class:`BenchConfig`, checked before any cluster starts, and
what follows from it alone (:func:`split_row`: a row's name, placement, rebalancing and Keras;
:func:`sized_rounds`; :func:`warm_up_tasks`).

>>> cfg = BenchConfig(strategies=("bsp", "hps8"), workers=4, steps_per_epoch=400)
>>> cfg.strategies, sized_rounds(cfg), warm_up_tasks(cfg)
(('pss', 'bsp', 'hps8'), [('hps8', 8)], 16)
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from tf_hetero.data import PER_WORKER
from tf_hetero.emulation.profile import Profile
from tf_hetero.policies.placement import PLACEMENTS
from tf_hetero.strategies import registry

__all__ = ["BenchConfig", "RowSpec", "split_row", "in_keras3", "sized_rounds", "warm_up_tasks"]


@dataclasses.dataclass
class BenchConfig:
    """One bench run: its rows (``strategies``, the reference ``pss`` added first), the
    cluster, the model and data, the sample budget and the learning-rate rule
    (:mod:`tf_hetero.policies.lr`); every field is checked on construction."""

    strategies: tuple = ("pss", "asp", "bsp", "backup", "ssp")
    workers: int = 4
    ps: int = 2
    profile: str = "slow=3:4"
    model: str = "mlp"
    dataset: str = "digits"
    batch_size: int = 32
    tasks: int = 400  # sample budget, in micro-batches of batch_size
    #: Time each round's (each stock step's) phases on its critical path
    #: (:mod:`tf_hetero.telemetry.roundprofile`): every step writes its stamps, one op more.
    round_profile: bool = False
    steps_per_epoch: int = 100
    #: Micro-batches per scheduled closure (Keras steps_per_execution): amortizes the ~10-20 ms
    #: a closure costs to launch; the closure is then the engine's task.
    steps_per_execution: int = 1
    base_lr: float = 0.02
    momentum: float = 0.9
    target_accuracy: float = 0.9
    eval_interval_s: float = 0.5
    out_dir: str = "runs/bench"
    json_path: str | None = None
    seed: int = 0
    #: Runs per strategy; every repeat runs all rows in an order shuffled from ``seed``,
    #: each from seed ``seed + repeat`` (model initialisation and data order).
    repeats: int = 1
    #: Learning rates tried per strategy, as factors of the linear rule; the table reports
    #: each strategy at its best (``--lr-grid``: 0.5, 1, 2).
    lr_factors: tuple = (1.0,)
    #: Momenta tried for the stock rows (``pss``) at each factor, the learning rate scaled by
    #: ``(1 - m) / (1 - momentum)`` so that ``lr / (1 - m)`` stays at the factor's value
    #: (``--lr-grid``: 0.9, 0.5, 0); empty: ``momentum`` only. The reference a fair user
    #: would pick is stock PSS at its best rate and momentum.
    momenta: tuple = ()
    #: Updates over which the learning rate ramps up linearly (Goyal et al.) for strategies
    #: whose update averages more than one micro-batch; 0: none; ``None`` (the default): as
    #: many updates as one update averages micro-batches
    #: (:func:`tf_hetero.policies.lr.warmup_updates`).
    warmup_updates: int | None = None
    #: How the workers divide the training set (:func:`tf_hetero.data.dataset_fn`'s
    #: ``per_worker``): "reshuffle" (each all of it, in its own order: unbiased whichever
    #: worker reads more) or "shard" (each its own 1/N: only BSP-like rows read it evenly).
    data_per_worker: str = "reshuffle"

    def __post_init__(self):
        names = [s.strip() for s in self.strategies if s.strip()]
        for s in names:
            registry.parse(split_row(s)[0])  # raises a clear error for unknown names
        if "pss" not in names:
            names.insert(0, "pss")  # the reference row
        self.strategies = tuple(dict.fromkeys(names))
        for name in ("workers", "ps", "batch_size", "tasks", "steps_per_epoch",
                     "steps_per_execution", "repeats"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"bench {name}={v!r}: need an integer >= 1.")
        if self.steps_per_epoch % self.steps_per_execution:
            raise ValueError(f"bench steps_per_epoch={self.steps_per_epoch} must be a multiple of "
                             f"steps_per_execution={self.steps_per_execution}.")
        for s, per_round in sized_rounds(self):  # checked before any cluster starts
            if self.steps_per_epoch % per_round:
                raise ValueError(
                    f"bench {s}: steps_per_epoch={self.steps_per_epoch} is not a multiple of "
                    f"its {per_round} batches per round (an epoch would end in a partial round, "
                    "sized differently). Fix: choose steps_per_epoch accordingly.")
        if self.tasks % self.steps_per_epoch:
            raise ValueError(f"bench tasks={self.tasks} must be a multiple of "
                             f"steps_per_epoch={self.steps_per_epoch}.")
        if self.data_per_worker not in PER_WORKER:
            raise ValueError(f"bench data_per_worker={self.data_per_worker!r}: use one of "
                             f"{', '.join(PER_WORKER)}.")
        self.lr_factors = tuple(float(f) for f in self.lr_factors)
        self.momenta = tuple(float(m) for m in self.momenta)
        if not all(0 <= m < 1 for m in self.momenta + (self.momentum,)):
            raise ValueError(f"momentum={self.momentum!r}, momenta={self.momenta!r}: need "
                             "0 <= m < 1.")
        if not self.lr_factors or not all(f > 0 for f in self.lr_factors):
            raise ValueError(f"lr_factors={self.lr_factors!r}: need factors > 0.")
        if self.warmup_updates is not None and (not isinstance(self.warmup_updates, int)
                                                or self.warmup_updates < 0):
            raise ValueError(f"warmup_updates={self.warmup_updates!r}: need an integer >= 0, "
                             "or None (as many updates as an update averages micro-batches).")
        if not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy={self.target_accuracy!r}: need 0 < t <= 1.")
        Profile.parse(self.profile).check_workers(self.workers)
        Profile.parse(self.profile).check_ps(self.ps)



class RowSpec(NamedTuple):
    """A bench row's settings (:func:`split_row`)."""

    base: str  # the registered strategy (with its variant suffix, e.g. ``hps8``)
    placement: str | None  # ``balanced`` / ``round_robin``, or None: the strategy's own
    rebalance: bool  # live rebalancing across PS tasks
    keras3: bool  # the row's model is a Keras 3 one (``import keras``), not tf_keras's
    failover: bool | int = False  # PS failover: True (a copy every 8 rounds) or the rounds


#: A row's ``+SUFFIX`` settings.
ROW_SUFFIXES = ("rebalance", "keras3", "failover")


def split_row(spec: str) -> RowSpec:
    """``NAME[@PLACEMENT][+rebalance][+keras3][+failover[N]][#COPY]`` -> a :class:`RowSpec`.

    ``+keras3`` trains the row's model with Keras 3 (``import keras``, on the cluster through
    :func:`tf_hetero.keras3.enable`) instead of tf_keras: ``bsp,bsp+keras3`` runs BSP under
    both side by side; ``+failover`` turns on PS failover (its copies' cost, beside the row
    without), ``+failoverN`` with a copy every N applied rounds (``set_failover(N)``).
    ``#COPY`` (a number) makes another row of the same settings:
    ``hps,hps#2`` runs H-PS twice side by side, a control row whose spread says how large a
    difference between rows of one run is noise (docs/MEASUREMENT.md).

    >>> tuple(split_row("hps8@balanced")), tuple(split_row("pss"))
    (('hps8', 'balanced', False, False, False), ('pss', None, False, False, False))
    >>> tuple(split_row("bsp+rebalance")), tuple(split_row("pss+keras3#2"))
    (('bsp', None, True, False, False), ('pss', None, False, True, False))
    >>> split_row("bsp@balanced+rebalance+keras3#3")
    RowSpec(base='bsp', placement='balanced', rebalance=True, keras3=True, failover=False)
    >>> split_row("hps+failover").failover, split_row("asp+failover2").failover
    (True, 2)
    >>> split_row("bsp+fast")
    Traceback (most recent call last):
    ...
    ValueError: bench row 'bsp+fast': suffix '+fast' is unknown. Fix: NAME+rebalance, NAME+keras3, NAME+failover[N], or several (NAME+rebalance+keras3).
    >>> split_row("hps#b")
    Traceback (most recent call last):
    ...
    ValueError: bench row 'hps#b': copy 'b' is not a number. Fix: NAME#2 for a second row of NAME.
    """
    settings, hash_, copy = spec.partition("#")
    if hash_ and not copy.isdigit():
        raise ValueError(f"bench row {spec!r}: copy {copy!r} is not a number. Fix: NAME#2 for "
                         "a second row of NAME.")
    head, *suffixes = settings.split("+")
    parsed = [(_rounds_between_copies(x), x) for x in suffixes]
    every = [n for n, _ in parsed if n]
    suffixes = ["failover" if n else x for n, x in parsed]
    for suffix in suffixes:
        if suffix not in ROW_SUFFIXES or suffixes.count(suffix) > 1:
            raise ValueError(f"bench row {spec!r}: suffix '+{suffix}' is unknown. Fix: "
                             "NAME+rebalance, NAME+keras3, NAME+failover[N], or several "
                             "(NAME+rebalance+keras3).")
    base, sep, placement = head.partition("@")
    if sep and placement not in PLACEMENTS:
        raise ValueError(f"bench row {spec!r}: placement {placement!r} is unknown. Fix: "
                         f"NAME@balanced or NAME@round_robin ({', '.join(PLACEMENTS)}).")
    rebalance = "rebalance" in suffixes
    failover = every[0] if every else "failover" in suffixes
    if base == "pss" and (sep or rebalance or failover):
        raise ValueError(f"bench row {spec!r}: the stock ParameterServerStrategy places "
                         "variables round-robin only and never moves them. Fix: use a "
                         "tf-hetero strategy, e.g. asp@balanced or bsp+rebalance.")
    return RowSpec(base, placement if sep else None, rebalance, "keras3" in suffixes, failover)


def _rounds_between_copies(suffix: str) -> int | None:
    """N of a ``failoverN`` row suffix (N >= 1), else None.

    >>> _rounds_between_copies("failover2"), _rounds_between_copies("failover")
    (2, None)
    """
    n = suffix[len("failover"):]
    return int(n) if suffix.startswith("failover") and n.isdigit() and int(n) > 0 else None


def in_keras3(rows) -> tuple:
    """Every row with its model in Keras 3 (``+keras3`` added where missing; ``--keras 3``).

    >>> in_keras3(["pss", "hps@balanced#2", "bsp+keras3"])
    ('pss+keras3', 'hps@balanced+keras3#2', 'bsp+keras3')
    """
    out = []
    for row in rows:
        settings, hash_, copy = row.partition("#")
        if not split_row(row).keras3:
            settings += "+keras3"
        out.append(settings + hash_ + copy)
    return tuple(out)


def sized_rounds(cfg: BenchConfig) -> list[tuple[str, int]]:
    """``(strategy, fit steps per round)`` of every row with per-worker batch sizes: an
    epoch of such a row must hold whole rounds.

    >>> sized_rounds(BenchConfig(strategies=("bsp", "hps8"), workers=4, steps_per_epoch=400))
    [('hps8', 8)]
    """
    out = []
    for row in cfg.strategies:
        s = split_row(row)[0]
        if registry.entry(registry.parse(s)[0]).sized:
            out.append((s, registry.updates_per_round(s, cfg.workers) * cfg.steps_per_execution))
    return out


def warm_up_tasks(cfg: BenchConfig) -> int:
    """Tasks of each row's untimed warm-up fit: a few rounds of every row, a whole number of
    each sized row's rounds and of ``steps_per_execution``.

    >>> warm_up_tasks(BenchConfig(strategies=("bsp", "hps"), workers=4, steps_per_epoch=400))
    16
    """
    unit = math.lcm(cfg.workers, cfg.steps_per_execution,
                    *(per_round for _, per_round in sized_rounds(cfg)))
    return unit * max(1, -(-4 * cfg.workers // unit))  # >= 4 tasks per worker

