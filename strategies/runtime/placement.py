"""TF glue of variable placement: where a variable is created, by a
:class:`tf_hetero.policies.placement.Placement` (the pure rule).

``ParameterServerStrategyV2Extended._create_variable`` sends every variable that is not
colocated with another, each shard of a ``variable_partitioner`` included, through
``_create_variable_round_robin(next_creator, **kwargs)`` (pssv2 ~872), which opens
``ops.device("/job:ps/task:K/device:CPU:0")`` with ``K = _variable_count % num_ps``. A
``tf.device`` scope in user code is ignored there. ``HeteroExtended`` overrides that method
with :func:`create_variable`: the placement chooses the PS (``None`` keeps TF's round-robin)
and records where the variable landed. Optimizer slots and tf-hetero's accumulators are
created with ``colocate_vars_with(var)`` and follow their variable without passing here.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.policies.placement import ps_index

__all__ = ["create_variable", "variable_bytes", "plan_from_model", "shard_bytes"]


def variable_bytes(kwargs) -> int | None:
    """Bytes of the variable ``kwargs`` describe (``None`` if its shape is unknown before it
    is created: an initial value given as a callable without ``shape=``)."""
    shape, dtype = kwargs.get("shape"), kwargs.get("dtype")
    value = kwargs.get("initial_value")
    if shape is None and value is not None and not callable(value):
        shape = getattr(value, "shape", None) or np.shape(value)
        dtype = dtype or getattr(value, "dtype", None)
    if shape is None:
        return None
    shape = tf.TensorShape(shape)
    if not shape.is_fully_defined():
        return None
    dtype = tf.as_dtype(dtype or tf.float32)
    return int(shape.num_elements() * max(dtype.size, 1))


def create_variable(extended, placement, round_robin, next_creator, kwargs):
    """Creates one PS variable where ``placement`` says; ``round_robin`` is TF's method."""
    nbytes = variable_bytes(kwargs)
    accesses = 2 if kwargs.get("trainable", True) else 1  # read + push, or read only
    ps = placement.choose(nbytes or 0, accesses)
    if ps is None:
        var = round_robin(next_creator, **kwargs)
    else:
        # As TF's method does: clear the colocation scope (it would conflict with the device
        # scope) and name CPU:0 of the PS (a worker's GPU scope must not leak in).
        with tfcompat.ops.placed_on(f"/job:ps/task:{ps}/device:CPU:0"):
            var = next_creator(**kwargs)
        tfcompat.strategy.count_variable(extended)
    actual = int(var.shape.num_elements() * var.dtype.size) if var.shape.is_fully_defined() else 0
    placement.record(ps_index(var.device), actual, accesses, getattr(var, "name", ""))
    return var


def shard_bytes(shape, dtype, partitioner) -> list[int]:
    """Bytes of each shard ``partitioner`` makes of a variable, split as
    ``ParameterServerStrategyV2Extended._create_variable`` does ("div": the first
    ``rows % n`` shards one row longer; pssv2 ~795)."""
    shape, dtype = tf.TensorShape(shape), tf.as_dtype(dtype)
    total = int(shape.num_elements() * dtype.size)
    if partitioner is None or shape.rank is None or shape.rank < 1:
        return [total]
    n = min(int(partitioner(shape=shape, dtype=dtype)[0]), int(shape[0]))
    if n <= 1:
        return [total]
    row = total // int(shape[0])
    base, extra = divmod(int(shape[0]), n)
    return [(base + (1 if i < extra else 0)) * row for i in range(n)]


def plan_from_model(placement, partitioner) -> list[int]:
    """Builds ``placement.model_fn()`` once in a throwaway graph (no variable reaches the
    cluster), lists its variables as the strategy will create them (shards included, in
    creation order) and hands them to ``placement.set_plan`` (largest first)."""
    units = []

    def record(next_creator, **kwargs):
        var = next_creator(**kwargs)
        accesses = 2 if kwargs.get("trainable", True) else 1
        units.extend((n, accesses) for n in shard_bytes(var.shape, var.dtype, partitioner))
        return var

    with tf.Graph().as_default(), tf.variable_creator_scope(record):
        placement.model_fn()
    return placement.set_plan(units)
