"""tf.distribute glue: the strategy, its Extended and coordinator, and the named strategies.

Re-exported from :mod:`tf_hetero` (``tf_hetero.BSPStrategy`` etc.).
"""

from __future__ import annotations

from tf_hetero.strategies.epsp import EPSPStrategy
from tf_hetero.strategies.hps import HPSStrategy
from tf_hetero.strategies.strategy import (ASP, BackupWorkerStrategy, BSPStrategy, EngineConfig,
                                           HeteroExtended, HeteroStrategy, SSPStrategy)

__all__ = ["HeteroStrategy", "HeteroExtended", "EngineConfig", "ASP", "BSPStrategy",
           "BackupWorkerStrategy", "SSPStrategy", "EPSPStrategy", "HPSStrategy", "stock_parameter_server_strategy",
           "ParameterServerError"]


def stock_parameter_server_strategy(cluster_resolver):
    """TensorFlow's own asynchronous ``tf.distribute.ParameterServerStrategy`` (the reference)."""
    import tensorflow as tf

    return tf.distribute.ParameterServerStrategy(cluster_resolver)


def __getattr__(name):
    if name == "ParameterServerError":
        from tf_hetero.strategies.coordinator import ParameterServerError

        return ParameterServerError
    raise AttributeError(name)
