"""tf-hetero: tf.distribute strategies for heterogeneous parameter-server clusters.

The public API, re-exported here (loaded lazily, so ``import tf_hetero`` is quick and the pure
modules work without importing TensorFlow):

- cluster launch (:mod:`tf_hetero.cluster`): :class:`LocalCluster`, :func:`run`,
  :func:`serve`, :func:`cluster_resolver`, :func:`parse_tf_config`, :class:`TFConfigError`,
  :func:`wait_for_cluster` (a bounded wait for the servers, also before stock PSS)
- heterogeneity emulation (:mod:`tf_hetero.emulation`): :class:`Profile`, :func:`emulate`
- strategies (:mod:`tf_hetero.strategies`): :class:`HeteroStrategy` and the named strategies
  :class:`ASPStrategy`, :class:`BSPStrategy`, :class:`BackupWorkerStrategy`,
  :class:`SSPStrategy`, :class:`EPSPStrategy` (Falcon), :class:`HPSStrategy` (H-PS),
  :class:`GroupedSyncStrategy` (grouped hybrid sync), :class:`DynSGDStrategy`,
  :class:`CASPStrategy` (communities chosen by a trained agent)
- measurement (:mod:`tf_hetero.telemetry`) and Keras callbacks (:mod:`tf_hetero.callbacks`):
  :class:`Monitor`, :class:`TaskLog`, :class:`MonitorLogs`, :class:`Progress`
- the pure layers: :mod:`tf_hetero.engine` (round engine and its contracts),
  :mod:`tf_hetero.policies`
- Keras 3 ``model.fit`` on a parameter-server cluster: :func:`tf_hetero.keras3.enable`
  (:mod:`tf_hetero.keras3`; docs/KERAS3.md)
- subpackages: :mod:`tf_hetero.models`, :mod:`tf_hetero.data`; commands live in
  :mod:`tf_hetero.tools` (not part of the library API)
- TensorFlow's C++ log lines are kept out of the output once ``tf_hetero`` is imported (import
  it before TensorFlow), unless ``TF_HETERO_TF_LOGS=1``: :mod:`tf_hetero.tflogs`

>>> import tf_hetero
>>> tf_hetero.Profile.parse("slow=1:4").constant_slowdowns(2)
(1.0, 4.0)
"""

from __future__ import annotations

import importlib

from tf_hetero import tflogs as _tflogs

# Before TensorFlow is imported: no TensorFlow C++ log lines unless TF_HETERO_TF_LOGS=1.
_tflogs.quiet()

__version__ = "0.1.0"

_EXPORTS = {
    "LocalCluster": "tf_hetero.cluster.local",
    "ClusterStartError": "tf_hetero.cluster.local",
    "wait_for_cluster": "tf_hetero.cluster.reach",
    "ClusterUnreachableError": "tf_hetero.cluster.reach",
    "run": "tf_hetero.cluster.roles",
    "serve": "tf_hetero.cluster.roles",
    "cluster_resolver": "tf_hetero.cluster.roles",
    "parse_tf_config": "tf_hetero.cluster.tf_config",
    "TFConfig": "tf_hetero.cluster.tf_config",
    "TFConfigError": "tf_hetero.cluster.tf_config",
    "Profile": "tf_hetero.emulation.profile",
    "ProfileError": "tf_hetero.emulation.profile",
    "emulate": "tf_hetero.emulation.device",
    "TaskLog": "tf_hetero.telemetry.tasklog",
    "Progress": "tf_hetero.callbacks",
    "MonitorLogs": "tf_hetero.callbacks",
    "Monitor": "tf_hetero.telemetry.monitor",
    "HeteroStrategy": "tf_hetero.strategies",
    "EngineConfig": "tf_hetero.strategies",
    "ASPStrategy": "tf_hetero.strategies",
    "ASP": "tf_hetero.strategies",
    "BSPStrategy": "tf_hetero.strategies",
    "BackupWorkerStrategy": "tf_hetero.strategies",
    "SSPStrategy": "tf_hetero.strategies",
    "EPSPStrategy": "tf_hetero.strategies",
    "HPSStrategy": "tf_hetero.strategies",
    "GroupedSyncStrategy": "tf_hetero.strategies",
    "DynSGDStrategy": "tf_hetero.strategies",
    "CASPStrategy": "tf_hetero.strategies",
    "AutoStrategy": "tf_hetero.strategies",
    "ParameterServerError": "tf_hetero.strategies",
    "DivergenceError": "tf_hetero.policies.diverge",
    "FailoverConfig": "tf_hetero.policies.failover",
}
_SUBPACKAGES = ("models", "strategies", "data", "engine", "policies", "telemetry", "cluster",
                "emulation", "callbacks", "tflogs", "keras3")

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
