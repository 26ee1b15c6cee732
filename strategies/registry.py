"""Strategies by name, for the CLI, the demo and the benchmark. Each entry owns what the tools
need to know of its strategy: how to build it, what a number after its name means, and how
many micro-batches one update averages (the learning-rate rule).

>>> names()
['asp', 'auto', 'backup', 'bsp', 'casp', 'caspsized', 'dynsgd', 'epsp', 'epspslack', 'grouped', 'groupedsized', 'hps', 'hpsfp', 'hpsint', 'hpsoverlap', 'hpspipe', 'pss', 'ssp']
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
           "updates_per_round", "engine_config", "help_text"]


@dataclasses.dataclass(frozen=True)
class StrategyEntry:
    """One registered strategy.

    ``create(cluster_resolver, arg)`` builds it; ``arg`` is the number after the name
    (``default_arg`` without one; ``arg_meaning`` says what it sets, empty: takes none);
    ``micro_batches_per_update(num_workers, arg)`` is how many micro-batches one update
    averages (the linear learning-rate rule scales by it); ``sized``: one task per worker per
    round, sized by speed (a round reads that many dataset batches in N closures), so an
    epoch of whole rounds is ``micro_batches_per_update`` steps a round. ``groupedsized`` and
    ``caspsized`` size tasks too but are not ``sized``: each group or community has a round
    of its own, of its members' count of batches, which changes when they regroup."""

    name: str
    create: Callable
    default_arg: int | None = None
    arg_meaning: str = ""
    micro_batches_per_update: Callable[[int, int | None], int] = lambda workers, arg: 1
    help: str = ""
    sized: bool = False
    config: Callable | None = None


_REGISTRY: dict[str, StrategyEntry] = {}


def register(name: str, create: Callable, default_arg: int | None = None, arg: str = "", *,
             updates: Callable[[int, int | None], int] = lambda workers, arg: 1,
             help: str = "", replace: bool = False, sized: bool = False,
             config: Callable | None = None) -> None:  # pylint: disable=redefined-builtin
    """Adds a strategy: ``create(cluster_resolver, arg)`` builds it; ``NAME<k>`` sets ``arg``
    (its meaning: ``arg``); ``updates(num_workers, arg)``: micro-batches per update;
    ``config(num_workers, arg)``: its engine config without TensorFlow (for the simulator)."""
    if not re.fullmatch(r"[a-z]+", name):
        raise ValueError(f"strategy name {name!r}: use lowercase letters only.")
    if name in _REGISTRY and not replace:
        raise ValueError(f"strategy {name!r} is registered already ({_REGISTRY[name].help}). "
                         "Fix: choose another name, or pass replace=True.")
    _REGISTRY[name] = StrategyEntry(name, create, default_arg, arg, updates, help, sized, config)


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


def make(spec: str, cluster_resolver, **options):
    """Builds the strategy named by ``spec`` on ``cluster_resolver``; ``options`` are passed
    to its class as keywords (the built-in ones take ``variable_partitioner``, and all but
    ``pss`` take ``placement``, ``connect_timeout_s``, ``stall_timeout_s``)."""
    name, arg = parse(spec)
    if options:
        return _REGISTRY[name].create(cluster_resolver, arg, **options)
    return _REGISTRY[name].create(cluster_resolver, arg)


def engine_config(spec: str, num_workers: int):
    """The :class:`~tf_hetero.strategies.config.EngineConfig` the strategy named by ``spec``
    gives the engine on ``num_workers`` workers, built without TensorFlow (the one its
    ``create`` builds too).

    >>> engine_config("backup2", 8).sync
    FirstK(backups=2)
    """
    name, arg = parse(spec)
    e = _REGISTRY[name]
    if e.config is None:
        raise ValueError(f"Strategy {name!r} was registered without config=: its engine "
                         "configuration is known only to its TensorFlow constructor. Fix: "
                         "register it with config=lambda num_workers, arg: EngineConfig(...).")
    return e.config(num_workers, arg)


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


_ARG = object()  # in _preset(): "the number after the name goes here"


# Strategy modules import TensorFlow: each factory imports lazily, so the CLI's --help stays
# quick.
def _preset(cls_name, config_name, **fixed):
    """A preset's ``create`` and ``config``: the same arguments to its class and to its pure
    engine config (strategies/config.py, for the simulator), one source of truth for both."""
    def kwargs(arg):
        return {k: (arg if v is _ARG else v) for k, v in fixed.items()}

    def create(resolver, arg, **options):
        from tf_hetero import strategies

        return getattr(strategies, cls_name)(resolver, **kwargs(arg), **options)

    def config(workers, arg):
        from tf_hetero.strategies import config as configs

        return getattr(configs, config_name)(workers, **kwargs(arg))
    return {"create": create, "config": config}


def _stock(resolver, _, **options):
    import tensorflow as tf

    return tf.distribute.ParameterServerStrategy(resolver, **options)


def _stock_config(workers, arg):
    from tf_hetero.strategies import config as configs

    return configs.asp(workers, name="pss")  # every task applied at once, by TF's closure queue


def _hps_tasks(workers, arg):
    # A round averages K dataset batches (hpsK; default N, BSP's global batch).
    return arg or workers


def _builtin():
    register("pss", _stock, config=_stock_config,
             help="stock TF ParameterServerStrategy (async reference)")
    register("asp", **_preset("ASPStrategy", "asp"), help="async, monitored (as stock TF)")
    register("bsp", **_preset("BSPStrategy", "bsp"), updates=lambda n, a: n,
             help="one task per worker per round, waits for all")
    register("backup", **_preset("BackupWorkerStrategy", "backup", backups=_ARG), default_arg=1,
             arg="backups", updates=lambda n, a: max(1, n - a),
             help="applies the first N-B tasks of a round")
    register("ssp", **_preset("SSPStrategy", "ssp", staleness=_ARG), default_arg=3,
             arg="staleness", help="async, no worker more than S tasks ahead")
    register("epsp", **_preset("EPSPStrategy", "epsp", round_batches=_ARG), arg="batches per round",
             updates=lambda n, a: a or n,
             help="EPSP enforced sync, one task per participant sized by speed", sized=True)
    register("epspslack", **_preset("EPSPStrategy", "epsp", sync="slack", round_batches=_ARG),
             arg="batches per round", updates=lambda n, a: a or n, help="EPSP slack sync",
             sized=True)
    register("hps", **_preset("HPSStrategy", "hps", round_batches=_ARG), arg="batches per round",
             updates=_hps_tasks,
             help="H-PS per-worker batch sizes, one task and one push per worker per round", sized=True)
    register("hpsoverlap", **_preset("HPSStrategy", "hps", round_batches=_ARG, overlap=True),
             arg="batches per round", updates=_hps_tasks,
             help="H-PS whose next round runs while the last one is applied (staleness 1)",
             sized=True)
    register("hpspipe", **_preset("HPSStrategy", "hps", round_batches=_ARG, pipeline=True),
             arg="batches per round", updates=_hps_tasks, help="H-PS with pipelined pushes",
             sized=True)
    # The number after hpsint/hpsfp is the codec's bits: the class takes quantize=, the pure
    # config the canonical codec name (the class maps one to the other).
    for kind, default, meaning, text in (("int", 8, "bits (8 or 4)", "H-PS with int8/int4 pushes"),
                                         ("fp", 16, "bits (16)", "H-PS with fp16 pushes")):
        register(f"hps{kind}",
                 lambda r, b, k=kind, **o: _preset("HPSStrategy", "hps", quantize=f"{k}{b}")["create"](r, None, **o),
                 default, meaning, updates=lambda n, a: _hps_tasks(n, None), help=text, sized=True,
                 config=lambda n, b, k=kind: _preset("HPSStrategy", "hps", codec=f"{k}{b}")["config"](n, None))
    register("grouped", **_preset("GroupedSyncStrategy", "grouped", groups=_ARG), default_arg=2,
             arg="groups", updates=lambda n, a: n,
             help="grouped hybrid sync: K groups of similar speed, sync within, async between")
    register("dynsgd", **_preset("DynSGDStrategy", "dynsgd"),
             help="async, each update scaled by 1/(1+staleness) (DynSGD)")
    register("casp", **_preset("CASPStrategy", "casp"), updates=lambda n, a: n,
             help="community-aware sync: a trained A3C agent picks the speed communities")
    register("groupedsized", **_preset("GroupedSyncStrategy", "grouped", groups=_ARG,
                                      batch_sizes=True), default_arg=2, arg="groups",
             updates=lambda n, a: n,
             help="grouped sync, each group's batches split across its members by speed")
    register("auto", **_preset("AutoStrategy", "auto"),
             help="adaptive: async or sized rounds, global batch and step chosen from the "
                  "measured speeds and gradient noise (give it the one-batch rate)")
    register("caspsized", **_preset("CASPStrategy", "casp", batch_sizes=True),
             updates=lambda n, a: n,
             help="CASP, each community's batches split across its members by speed")


_builtin()
