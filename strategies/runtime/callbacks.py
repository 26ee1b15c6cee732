"""Keras callbacks that cannot work under ``ParameterServerStrategy`` fail before the fit.

tf_keras refuses batch-level callbacks under ``ParameterServerStrategy`` with a clear error
before the first step (``CallbackList._disallow_batch_hooks_in_ps_strategy``), except those
that say they take tensor logs (``_supports_tf_logs``), since those can take a step's
``RemoteValue``. ``TerminateOnNaN`` says so but cannot: it calls ``logs.get("loss")`` on
the ``RemoteValue``, whose ``get()`` takes no key, so the fit fails after its first step
with ``TypeError: RemoteValueImpl.get() takes 1 positional argument but 2 were given``
(stock PSS too; tf_keras 2.21). Fetching each step's loss for it instead would make the
chief wait for every step, which a round strategy cannot do without breaking its rounds.

:func:`install` makes a ``fit`` under a tf-hetero strategy (only) refuse ``TerminateOnNaN``
before its first step, with the cause and the fix: a tf-hetero strategy stops a fit
whose loss or round gradient is not finite by itself (``runtime/divergence.py``).
"""

from __future__ import annotations

from tf_hetero import tfcompat
from tf_hetero.strategies.runtime.fitplan import state_of

__all__ = ["install", "check"]

TERMINATE_ON_NAN = (
    "tf-hetero: keras.callbacks.TerminateOnNaN cannot run under ParameterServerStrategy: "
    "tf_keras hands it each step's RemoteValue instead of the step's logs, and the fit "
    "would fail after its first step (\"RemoteValueImpl.get() takes 1 positional argument\"; "
    "stock ParameterServerStrategy does the same). {strategy} already stops a fit whose loss "
    "or update is not finite (NaN/Inf) or explodes, with a DivergenceError that says what "
    "to lower. Fix: remove TerminateOnNaN from callbacks=.")


def check(callbacks, strategy) -> None:
    """Raises ``ValueError`` if ``callbacks`` (a ``CallbackList`` or a list) holds a
    callback that cannot work under ``strategy``, a tf-hetero strategy.

    >>> import tf_keras as keras
    >>> check([keras.callbacks.History()], object())
    >>> check([keras.callbacks.TerminateOnNaN()], object())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: tf-hetero: keras.callbacks.TerminateOnNaN cannot run under ...
    """
    from tf_keras.callbacks import TerminateOnNaN

    if any(isinstance(cb, TerminateOnNaN) for cb in callbacks):
        raise ValueError(TERMINATE_ON_NAN.format(strategy=type(strategy).__name__))


def install() -> None:
    """Wraps tf_keras's ``CallbackList.on_train_begin`` (once per process) to run
    :func:`check` on a ``fit``'s callbacks under a tf-hetero strategy, before the first step
    (``evaluate`` and ``predict`` never call a ``TerminateOnNaN``, so they are left alone)."""
    tfcompat.keras.wrap_train_begin(_checked_on_train_begin)


def _checked_on_train_begin(original):
    def on_train_begin(self, logs=None):
        import tensorflow as tf

        strategy = tf.distribute.get_strategy()
        if state_of(strategy) is not None:
            check(self.callbacks, strategy)
        return original(self, logs)

    return on_train_begin
