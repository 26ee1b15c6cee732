"""tf.distribute glue: strategy, extended and coordinator subclasses, and the named strategies.

The round engine and named strategies arrive with the round-engine issue. Until then this
package offers the stock reference strategy under the name the demo and benchmarks use.
"""

from __future__ import annotations

__all__ = ["stock_parameter_server_strategy"]


def stock_parameter_server_strategy(cluster_resolver):
    """TensorFlow's own asynchronous ``tf.distribute.ParameterServerStrategy`` (the reference)."""
    import tensorflow as tf

    return tf.distribute.ParameterServerStrategy(cluster_resolver)
