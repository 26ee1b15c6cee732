"""Strategies by name, for the CLI, the demo and the benchmark. Each entry owns what the tools
need to know of its strategy: how to build it, what a number after its name means, and how
many micro-batches one update averages (the learning-rate rule).

>>> names()
['asp', 'backup', 'bsp', 'epsp', 'epspslack', 'hps', 'hpsfp', 'hpsint', 'hpspipe', 'pss', 'ssp']
>>> parse("backup2"), parse("ssp"), parse("bsp")
(('backup', 2), ('ssp', 3), ('bsp', None))
>>> updates_per_round("backup1", 4), updates_per_round("hps", 4), updates_per_round("hps16", 4)
(3, 4, 16)

A new strategy is one :func:`register` call (a second registration of a name is refused
unless ``replace=True``):

>>> register("toy", lambda resolver, arg: None, help="a toy")
>>> register("toy", lambda resolver, arg: None)
Traceback (most recent call last):
...
ValueError: strategy 'toy' is registered already (a toy). Fix: choose another name, or pass replace=True.
>>> unregister("toy")
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

__all__ = ["StrategyEntry", "names", "parse", "make", "register", "unregister", "entry",
           "updates_per_round", "help_text"]


@dataclasses.dataclass(frozen=True)
class StrategyEntry:
    """One registered strategy.

    ``create(cluster_resolver, arg)`` builds it; ``arg`` is the number after the name
    (``default_arg`` without one; ``arg_meaning`` says what it sets, empty: takes none);
    ``micro_batches_per_update(num_workers, arg)`` is how many micro-batches one update
    averages (the linear learning-rate rule scales by it); ``sized``: one task per worker per
    round, sized by speed (a round reads that many dataset batches in N closures)."""

    name: str
    create: Callable
    default_arg: int | None = None
    arg_meaning: str = ""
    micro_batches_per_update: Callable[[int, int | None], int] = lambda workers, arg: 1
    help: str = ""
    sized: bool = False


_REGISTRY: dict[str, StrategyEntry] = {}


def register(name: str, create: Callable, default_arg: int | None = None, arg: str = "", *,
             updates: Callable[[int, int | None], int] = lambda workers, arg: 1,
             help: str = "", replace: bool = False, sized: bool = False) -> None:  # pylint: disable=redefined-builtin
    """Adds a strategy: ``create(cluster_resolver, arg)`` builds it; ``NAME<k>`` sets ``arg``
    (its meaning: ``arg``); ``updates(num_workers, arg)``: micro-batches per update."""
    if not re.fullmatch(r"[a-z]+", name):
        raise ValueError(f"strategy name {name!r}: use lowercase letters only.")
    if name in _REGISTRY and not replace:
        raise ValueError(f"strategy {name!r} is registered already ({_REGISTRY[name].help}). "
                         "Fix: choose another name, or pass replace=True.")
    _REGISTRY[name] = StrategyEntry(name, create, default_arg, arg, updates, help, sized)


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def entry(name: str) -> StrategyEntry:
    return _REGISTRY[name]


def parse(spec: str) -> tuple[str, int | None]:
    """``"backup2"`` -> ``("backup", 2)``; a name without a number takes its default."""
    m = re.fullmatch(r"([a-z]+)(\d*)", spec.strip().lower())
    if not m or m.group(1) not in _REGISTRY:
        raise ValueError(f"Unknown strategy {spec!r}. Fix: use one of {', '.join(names())} "
                         "(a number after backup/ssp sets backups/staleness, e.g. backup2, ssp5).")
    name, digits = m.groups()
    e = _REGISTRY[name]
    if digits and not e.arg_meaning:
        raise ValueError(f"Strategy {name!r} takes no number; received {spec!r}.")
    return name, int(digits) if digits else e.default_arg


def make(spec: str, cluster_resolver):
    """Builds the strategy named by ``spec`` on ``cluster_resolver``."""
    name, arg = parse(spec)
    return _REGISTRY[name].create(cluster_resolver, arg)


def updates_per_round(spec: str, num_workers: int) -> int:
    """Micro-batches averaged into one update (for the linear learning-rate scaling rule)."""
    name, arg = parse(spec)
    return _REGISTRY[name].micro_batches_per_update(num_workers, arg)


def names() -> list[str]:
    """The registered strategy names."""
    return sorted(_REGISTRY)


def help_text() -> str:
    """One line per strategy for ``--help``: ``name[ARG]: help``."""
    return "; ".join(
        f"{e.name}{'[' + e.arg_meaning + ']' if e.arg_meaning else ''}: {e.help}"
        for e in (_REGISTRY[n] for n in names()))


def _builtin():
    # Strategy modules import TensorFlow: build lazily, so the CLI's --help stays quick.
    def preset(cls_name, **fixed):
        def create(resolver, arg, _fixed=fixed):
            from tf_hetero import strategies

            kwargs = {k: (arg if v is _ARG else v) for k, v in _fixed.items()}
            return getattr(strategies, cls_name)(resolver, **kwargs)
        return create

    def stock(resolver, _):
        import tensorflow as tf

        return tf.distribute.ParameterServerStrategy(resolver)

    def hps_tasks(workers, arg):
        # A round averages K dataset batches (hpsK; default N, BSP's global batch).
        return arg or workers

    register("pss", stock, help="stock TF ParameterServerStrategy (async reference)")
    register("asp", preset("ASPStrategy"), help="async, monitored (as stock TF)")
    register("bsp", preset("BSPStrategy"), updates=lambda n, a: n,
             help="one task per worker per round, waits for all")
    register("backup", preset("BackupWorkerStrategy", backups=_ARG), 1, "backups",
             updates=lambda n, a: max(1, n - a), help="applies the first N-B tasks of a round")
    register("ssp", preset("SSPStrategy", staleness=_ARG), 3, "staleness",
             help="async, no worker more than S tasks ahead")
    register("epsp", preset("EPSPStrategy", round_batches=_ARG), None, "batches per round",
             updates=lambda n, a: a or n,
             help="EPSP enforced sync, one task per participant sized by speed", sized=True)
    register("epspslack", preset("EPSPStrategy", sync="slack", round_batches=_ARG), None,
             "batches per round", updates=lambda n, a: a or n, help="EPSP slack sync", sized=True)
    register("hps", preset("HPSStrategy", round_batches=_ARG), None, "batches per round",
             updates=hps_tasks,
             help="H-PS per-worker batch sizes, one task and one push per worker per round", sized=True)
    register("hpspipe", preset("HPSStrategy", round_batches=_ARG, pipeline=True), None,
             "batches per round", updates=hps_tasks, help="H-PS with pipelined pushes", sized=True)
    register("hpsint", lambda r, b: preset("HPSStrategy", quantize=f"int{b}")(r, None), 8,
             "bits (8 or 4)", updates=lambda n, a: hps_tasks(n, None),
             help="H-PS with int8/int4 pushes", sized=True)
    register("hpsfp", lambda r, b: preset("HPSStrategy", quantize=f"fp{b}")(r, None), 16,
             "bits (16)", updates=lambda n, a: hps_tasks(n, None), help="H-PS with fp16 pushes", sized=True)


_ARG = object()  # in preset(): "the number after the name goes here"
_builtin()
