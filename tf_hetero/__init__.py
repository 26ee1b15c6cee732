"""tf-hetero: tf.distribute strategies for heterogeneous parameter-server clusters.

The public API, re-exported here (loaded lazily, so ``import tf_hetero`` is quick and the pure
modules work without importing TensorFlow):

- cluster launch: :class:`LocalCluster`, :func:`run`, :func:`serve`, :func:`cluster_resolver`,
  :func:`parse_tf_config`, :class:`TFConfigError`
- heterogeneity emulation: :class:`Profile`, :func:`emulate`
- strategies: :class:`HeteroStrategy` and the presets :func:`ASP`, :func:`BSPStrategy`,
  :func:`BackupWorkerStrategy`, :func:`SSPStrategy`, :func:`EPSPStrategy` (Falcon),
  :func:`HPSStrategy` (H-PS)
- measurement and progress: :class:`Monitor`, :class:`MonitorLogs`, :class:`TaskLog`,
  :class:`Progress`
- subpackages: :mod:`tf_hetero.models`, :mod:`tf_hetero.strategies`, :mod:`tf_hetero.data`

>>> import tf_hetero
>>> tf_hetero.Profile.parse("slow=1:4").constant_slowdowns(2)
(1.0, 4.0)
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "LocalCluster": "tf_hetero.cluster",
    "ClusterStartError": "tf_hetero.cluster",
    "run": "tf_hetero.launch",
    "serve": "tf_hetero.launch",
    "cluster_resolver": "tf_hetero.launch",
    "parse_tf_config": "tf_hetero.tf_config",
    "TFConfig": "tf_hetero.tf_config",
    "TFConfigError": "tf_hetero.tf_config",
    "Profile": "tf_hetero.profile",
    "ProfileError": "tf_hetero.profile",
    "emulate": "tf_hetero.emulation",
    "TaskLog": "tf_hetero.tasklog",
    "Progress": "tf_hetero.progress",
    "MonitorLogs": "tf_hetero.progress",
    "Monitor": "tf_hetero.monitor",
    "HeteroStrategy": "tf_hetero.strategies",
    "EngineConfig": "tf_hetero.strategies",
    "ASP": "tf_hetero.strategies",
    "BSPStrategy": "tf_hetero.strategies",
    "BackupWorkerStrategy": "tf_hetero.strategies",
    "SSPStrategy": "tf_hetero.strategies",
    "EPSPStrategy": "tf_hetero.strategies",
    "HPSStrategy": "tf_hetero.strategies",
    "ParameterServerError": "tf_hetero.strategies",
}
_SUBPACKAGES = ("models", "strategies", "data", "metrics", "quantize")

__all__ = sorted(_EXPORTS) + list(_SUBPACKAGES) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"tf_hetero.{name}")
    else:
        raise AttributeError(f"module 'tf_hetero' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
