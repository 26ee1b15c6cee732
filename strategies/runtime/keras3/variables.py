"""Atomic ``assign_add``/``assign_sub`` for Keras 3 variables on a parameter server.

A Keras 3 variable's ``assign_add(v)`` is ``self.assign(self + v)`` (k3/backend/common/
variables.py): a read, then a write of what was read plus ``v``. Under asynchronous
``ParameterServerStrategy`` two workers' steps interleave between the read and the write,
and one increment is lost: ``optimizer.iterations`` then counts fewer steps than ran, and a
metric's ``total``/``count`` fewer samples (the model's and the optimizer slots' updates go
through ``tf.Variable.assign_*`` already, colocated on the PS, and are safe).

:func:`install` makes the TensorFlow backend's ``Variable.assign_add``/``assign_sub`` add
on the PS in one op (``tf.Variable.assign_add``, which TF runs under the variable's lock)
for a variable whose ``tf.Variable`` lives on a ``/job:ps`` task; every other variable, and
any variable inside a ``keras.StatelessScope``, keeps Keras's own method.
"""

from __future__ import annotations

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.strategies.runtime.keras3.checks import on_ps

__all__ = ["install", "ps_inner"]


def ps_inner(variable):
    """The ``tf.Variable`` of a Keras 3 variable on a parameter server, else ``None``."""
    inner = tfcompat.keras3.inner_variable(variable)
    if inner is None or tfcompat.keras3.in_stateless_scope() or not on_ps(inner):
        return None
    return inner


def _atomic(op: str):
    def make(original):
        def update(self, value):
            inner = ps_inner(self)
            if inner is None:
                return original(self, value)
            value = tf.cast(tf.convert_to_tensor(value), inner.dtype)
            if value.shape != inner.shape:
                value = tf.broadcast_to(value, tf.shape(inner))
            return getattr(inner, op)(value)

        return update

    make.__name__ = make.__qualname__ = f"atomic_{op}"
    return make


_ADD, _SUB = _atomic("assign_add"), _atomic("assign_sub")


def install() -> None:
    """Wraps the two methods, once per process."""
    tfcompat.keras3.wrap_variable("assign_add", _ADD)
    tfcompat.keras3.wrap_variable("assign_sub", _SUB)
