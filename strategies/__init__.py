"""tf.distribute glue: the strategy base, the named strategies, the registry, and the runtime
(:mod:`tf_hetero.strategies.runtime`) under them.

Re-exported from :mod:`tf_hetero` (``tf_hetero.BSPStrategy`` etc.). Loaded lazily: the
registry (:mod:`~tf_hetero.strategies.registry`) and the closure tags need no TensorFlow, so
the CLI's ``--help`` stays quick.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "HeteroStrategy": "base", "HeteroExtended": "base", "EngineConfig": "base",
    "ASPStrategy": "presets", "ASP": "presets", "BSPStrategy": "presets",
    "BackupWorkerStrategy": "presets", "SSPStrategy": "presets",
    "EPSPStrategy": "epsp", "HPSStrategy": "hps",
    "GroupedSyncStrategy": "grouped", "DynSGDStrategy": "grouped",
    "CASPStrategy": "casp", "AutoStrategy": "auto",
    "ParameterServerError": "runtime.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tf_hetero.strategies' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tf_hetero.strategies.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
