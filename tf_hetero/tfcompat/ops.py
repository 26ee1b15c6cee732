"""TensorFlow internals below the distribution layer: ops, variables, functions and tf.data
(tensorflow/python/...).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import tensorflow as tf

from tf_hetero.patching import wrap_once

__all__ = ["sleep_dataset", "resource_variable_classes", "v1_optimizer_class",
           "ResourceVariable", "autograph_enabled", "wrap_device_datasets", "placed_on",
           "dataset_batch_size", "keep_only_local_job", "untraced_copy"]

# pylint: disable=protected-access


def _private():
    from tensorflow.python.data.experimental.ops import testing
    from tensorflow.python.ops import resource_variable_ops

    return testing, resource_variable_ops


def sleep_dataset(microseconds: tf.Tensor):
    """The ``SleepDataset`` transformation (``tf.data.experimental.sleep`` was public once;
    now tensorflow/python/data/experimental/ops/testing.py ``sleep(us)``): apply it with
    ``dataset.apply``. TensorFlow has no public sleep op."""
    testing, _ = _private()
    return testing.sleep(microseconds)


def resource_variable_classes() -> tuple[type, type]:
    """``BaseResourceVariable`` and ``ResourceVariable`` (ops/resource_variable_ops.py):
    their write methods are what a step's direct variable writes go through."""
    _, rvo = _private()
    return rvo.BaseResourceVariable, rvo.ResourceVariable


def ResourceVariable(*args, **kwargs):  # pylint: disable=invalid-name
    """A plain ``ResourceVariable`` (not through the strategy's variable creator: no
    ``CachingVariable`` wrapper, no placement), e.g. a counter on a device of our choice."""
    _, rvo = _private()
    return rvo.ResourceVariable(*args, **kwargs)


def v1_optimizer_class() -> type:
    """``tf.compat.v1.train.Optimizer`` (training/optimizer.py), whose ``apply_gradients``
    a step may call directly."""
    return tf.compat.v1.train.Optimizer


def untraced_copy(fn):
    """A new ``tf.function`` of ``fn``'s Python function with ``fn``'s options and none of its
    traces (``Function._clone``, polymorphic_function.py): its first call traces again, so
    it places its ops where the variables are now; ``fn`` itself is left as it is."""
    return fn._clone(None)


def autograph_enabled(fn) -> bool:
    """Was the ``tf.function`` ``fn`` made with ``autograph=True`` (``Function._autograph``,
    eager/polymorphic_function/polymorphic_function.py; default True)?"""
    return getattr(fn, "_autograph", True)


def wrap_device_datasets(make: Callable[[Callable], Callable]) -> bool:
    """Wraps ``multi_device_iterator_ops._create_device_dataset`` (data/ops/
    multi_device_iterator_ops.py), which builds the per-device dataset of every
    multi-device iterator (a parameter-server per-worker iterator is one)."""
    from tensorflow.python.data.ops import multi_device_iterator_ops

    return wrap_once(multi_device_iterator_ops, "_create_device_dataset", make)


@contextlib.contextmanager
def placed_on(device: str) -> Iterator[None]:
    """Variables created inside go to ``device`` whatever colocation scope is around
    (``ops.colocate_with(None, ignore_existing=True)`` then ``ops.device``, what
    ``_create_variable_round_robin`` does in pssv2)."""
    from tensorflow.python.framework import ops

    with ops.colocate_with(None, ignore_existing=True):
        with ops.device(device):
            yield


def dataset_batch_size(dataset) -> int | None:
    """The constant ``batch_size`` of the last ``batch()`` in ``dataset``'s pipeline, walking
    up through ``_input_dataset`` (repeat, prefetch, shuffle, map...) to a batch dataset's
    private ``_batch_size``; ``None`` if not found or not constant."""
    node = dataset
    for _ in range(64):
        batch = getattr(node, "_batch_size", None)
        if batch is not None:
            value = tf.get_static_value(batch)
            return int(value) if value is not None else None
        node = getattr(node, "_input_dataset", None)
        if node is None:
            return None
    return None


def keep_only_local_job(remote_addresses: set) -> bool:
    """Reconnects the eager context to this process's own job only, if it is connected to
    exactly ``remote_addresses`` (or a subset): later function frees then touch no remote
    task (``context.update_server_def``, eager/context.py). Returns whether it did."""
    from tensorflow.core.protobuf import tensorflow_server_pb2
    from tensorflow.python.eager import context

    current = context.context().get_server_def()
    if current is None:
        return False
    connected = {a for job in current.cluster.job if job.name != current.job_name
                 for a in job.tasks.values()}
    if not connected or not connected <= remote_addresses:
        return False  # connected to another cluster (or not to a remote one)
    local = tensorflow_server_pb2.ServerDef()
    local.CopyFrom(current)
    del local.cluster.job[:]
    local.cluster.job.extend(j for j in current.cluster.job if j.name == current.job_name)
    context.context().update_server_def(local)
    return True
