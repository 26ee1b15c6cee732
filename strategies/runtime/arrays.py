"""tf_keras's own input pipelines under a tf-hetero strategy: not autotuned.

Given numpy arrays or tensors, ``fit``, ``evaluate`` and ``predict`` under a
parameter-server strategy build the workers' ``tf.data`` pipeline themselves
(``data_adapter._ClusterCoordinatorDataHandler._convert_to_dataset_creator``: a
``DatasetCreator`` over the arrays' adapter, with ``AUTOTUNE`` parallel slicing and
prefetch). An autotuned pipeline's iterator waits, when it is deleted, for its autotuning
thread's sleep to end (up to 60 s; :func:`tf_hetero.data.without_autotune`), and a per-worker
iterator is deleted inline in its worker's executor when ``fit`` drops it: every later step
on that worker waits behind it (measured: docs/TF_INTERNALS.md, "Dropped iterators and
tf.data autotuning").

So while tf_keras builds such a pipeline for a tf-hetero strategy, the datasets it
distributes come without autotuning (:func:`install`; the strategy's
``distribute_datasets_from_function`` reads :attr:`FitState.keras_pipeline`). A user's own
``Dataset`` or ``DatasetCreator`` is not touched; stock ``ParameterServerStrategy`` neither.
In-memory slices have little to tune: what the pipeline loses is the prefetch buffer's and the
slicing's tuning, on data that is already in memory.
"""

from __future__ import annotations

from tf_hetero import tfcompat
from tf_hetero.strategies.runtime.fitplan import counted, state_of

__all__ = ["install", "builds_pipeline", "keras_pipeline"]


def builds_pipeline(x) -> bool:
    """Does tf_keras build the workers' pipeline for input ``x`` (arrays, tensors, a dict or
    list of them), rather than take the user's (a ``Dataset`` or ``DatasetCreator``)? Under a
    parameter-server strategy tf_keras takes nothing else.

    >>> import numpy as np, tensorflow as tf
    >>> builds_pipeline(np.zeros((4, 2))), builds_pipeline({"a": np.zeros(4)})
    (True, True)
    >>> builds_pipeline(tf.data.Dataset.range(3)), builds_pipeline(None)
    (False, False)
    """
    import tensorflow as tf
    import tf_keras

    return x is not None and not isinstance(
        x, (tf.data.Dataset, tf_keras.utils.experimental.DatasetCreator))


def keras_pipeline(strategy):
    """Datasets ``strategy`` distributes inside this block are tf_keras's own pipelines:
    autotuning off."""
    return counted(strategy, "keras_pipeline")


def install() -> None:
    """Wraps tf_keras's ``get_data_handler`` (once per process): under a tf-hetero strategy,
    a data handler built from arrays or tensors distributes its pipeline without autotuning
    (tf_keras makes the per-worker dataset while the handler is built)."""
    tfcompat.keras.wrap_data_handler(_untuned_keras_pipelines)


def _untuned_keras_pipelines(original):
    def get_data_handler(*args, **kwargs):
        strategy = getattr(kwargs.get("model"), "distribute_strategy", None)
        if state_of(strategy) is None or not builds_pipeline(kwargs.get("x")):
            return original(*args, **kwargs)
        with keras_pipeline(strategy):
            return original(*args, **kwargs)

    return get_data_handler
