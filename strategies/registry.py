"""Strategies by name, for the CLI, the demo and the benchmark.

>>> names()
['asp', 'backup', 'bsp', 'epsp', 'epspslack', 'hps', 'hpsfp', 'hpsint', 'hpspipe', 'pss', 'ssp']
>>> parse("backup2"), parse("ssp"), parse("bsp")
(('backup', 2), ('ssp', 3), ('bsp', None))
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["names", "parse", "make", "register", "updates_per_round"]

#: name -> (factory(resolver, arg), default arg, what the arg means)
_REGISTRY: dict[str, tuple[Callable, int | None, str]] = {}


def register(name: str, factory: Callable, default_arg: int | None = None, arg: str = "") -> None:
    """Adds a strategy: ``factory(cluster_resolver, arg)`` builds it; ``NAME<k>`` sets ``arg``."""
    if not re.fullmatch(r"[a-z]+", name):
        raise ValueError(f"strategy name {name!r}: use lowercase letters only.")
    _REGISTRY[name] = (factory, default_arg, arg)


def parse(spec: str) -> tuple[str, int | None]:
    """``"backup2"`` -> ``("backup", 2)``; a name without a number takes its default."""
    m = re.fullmatch(r"([a-z]+)(\d*)", spec.strip().lower())
    if not m or m.group(1) not in _REGISTRY:
        raise ValueError(f"Unknown strategy {spec!r}. Fix: use one of {', '.join(names())} "
                         "(a number after backup/ssp sets backups/staleness, e.g. backup2, ssp5).")
    name, digits = m.groups()
    _, default, arg = _REGISTRY[name]
    if digits and not arg:
        raise ValueError(f"Strategy {name!r} takes no number; received {spec!r}.")
    return name, int(digits) if digits else default


def make(spec: str, cluster_resolver):
    """Builds the strategy named by ``spec`` on ``cluster_resolver``."""
    name, arg = parse(spec)
    return _REGISTRY[name][0](cluster_resolver, arg)


def updates_per_round(spec: str, num_workers: int) -> int:
    """Micro-batches averaged into one update (for the linear learning-rate scaling rule)."""
    name, arg = parse(spec)
    if name == "bsp":
        return num_workers
    if name == "backup":
        return max(1, num_workers - arg)
    if name.startswith("epsp"):
        return arg or num_workers
    if name in ("hps", "hpspipe"):
        return arg or 4 * num_workers
    if name.startswith("hps"):
        return 4 * num_workers
    return 1


def names() -> list[str]:
    """The registered strategy names."""
    return sorted(_REGISTRY)


def _builtin():
    import tensorflow as tf

    from tf_hetero.strategies import strategy as s

    register("pss", lambda r, _: tf.distribute.ParameterServerStrategy(r))
    register("asp", lambda r, _: s.ASP(r))
    register("bsp", lambda r, _: s.BSPStrategy(r))
    register("backup", lambda r, b: s.BackupWorkerStrategy(r, backups=b), 1, "backups")
    register("ssp", lambda r, k: s.SSPStrategy(r, staleness=k), 3, "staleness")
    from tf_hetero.strategies.epsp import EPSPStrategy

    register("epsp", lambda r, k: EPSPStrategy(r, round_tasks=k), None, "round_tasks")
    register("epspslack", lambda r, k: EPSPStrategy(r, sync="slack", round_tasks=k), None,
             "round_tasks")
    from tf_hetero.strategies.hps import HPSStrategy

    register("hps", lambda r, k: HPSStrategy(r, round_tasks=k), None, "round_tasks")
    register("hpspipe", lambda r, k: HPSStrategy(r, round_tasks=k, pipeline=True), None,
             "round_tasks")
    register("hpsint", lambda r, b: HPSStrategy(r, quantize=f"int{b}"), 8, "bits (8 or 4)")
    register("hpsfp", lambda r, b: HPSStrategy(r, quantize=f"fp{b}"), 16, "bits (16)")


_builtin()
