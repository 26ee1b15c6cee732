"""Errors the runtime raises, and the translation of TensorFlow's into them."""

from __future__ import annotations

import functools
from typing import NoReturn

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.patching import wrap_once
from tf_hetero.strategies.runtime import fitplan
from tf_hetero.tfcompat import variables as tfvars

__all__ = ["ParameterServerError", "RAN_OUT", "RAN_OUT_FIT", "translate", "translated", "fail_fit",
           "install"]


_RAN_OUT_FIX = ("Fix: end the dataset with .repeat() and let steps_per_epoch set the epoch's "
                "length, or pass a steps_per_epoch no larger than the batches each worker's "
                "dataset holds.")
RAN_OUT = ("tf-hetero: this step did not run: the training data ran out before it (a "
           "worker's dataset ended, and TF cancelled the steps queued after that; Keras "
           "warned \"Your input ran out of data\"). " + _RAN_OUT_FIX)
#: What a fit that Keras ended early at the end of the data raises once it returns (when the
#: step whose logs Keras fetched last had run, :data:`RAN_OUT` is not raised by the fetch).
RAN_OUT_FIT = ("tf-hetero: the training data ran out during this fit: a worker's dataset "
               "ended before the epoch's steps_per_epoch steps, TF cancelled the steps queued "
               "after it and Keras ended the fit early (\"Your input ran out of data\"). "
               + _RAN_OUT_FIX)


class ParameterServerError(RuntimeError):
    """A parameter server became unreachable; its variables are lost."""


def is_ps_failure(e: BaseException) -> bool:
    return isinstance(e, tf.errors.UnavailableError) and "/job:ps" in str(e)


def translate(e: BaseException) -> BaseException:
    """``e``, or the error that says what it means to the user and what to do."""
    if is_ps_failure(e):
        return ParameterServerError(
            f"A parameter server is unreachable ({type(e).__name__}: {str(e).splitlines()[0]}). "
            "Its variables are lost, so training cannot go on. Fix: restart the PS task, then "
            "resume from the last checkpoint: re-run model.fit with a BackupAndRestore "
            "callback (tf_keras.callbacks or, for a Keras 3 model, keras.callbacks), or "
            "restore a ModelCheckpoint.")
    return e


def translated(call, *args, **kwargs):
    """``call(*args, **kwargs)``, raising the translated error if it raises."""
    try:
        return call(*args, **kwargs)
    except Exception as e:  # pylint: disable=broad-except
        _raise_translated(e)
        raise  # unreachable: _raise_translated always raises


def _raise_translated(e: BaseException) -> NoReturn:
    """Raises ``translate(e)`` from ``e``, or ``e`` itself when it needs no translation."""
    t = translate(e)
    if t is e:
        raise e
    raise t from e


def fail_fit(coordinator, error: BaseException) -> None:
    """Fails the running fit with ``error``: through the engine if the strategy has one,
    else (ASP) as the closure queue's error, as a failing closure would; the next
    ``schedule``, ``join`` or ``done`` raises it and cancels what is queued. Never both:
    each would raise it, once per fit. (A stock coordinator has no engine: its queue.)"""
    engine = getattr(coordinator, "engine", None)
    if engine is not None:
        engine.fail(error)
        return
    tfcompat.coordinator.queue_of(coordinator).fail(error)


def install() -> None:
    """Wraps tf_keras's ``Model.fit``, ``evaluate`` and ``predict`` (once per process) so that
    what they raise under a tf-hetero strategy is translated (:func:`translate`); under any
    other strategy they are untouched.

    The coordinator translates what its closures, joins and applies raise, but a PS that
    died between two steps can be met first by an op the chief runs itself: measured, a BSP
    fit whose only PS was killed at the end of epoch 1 raised TensorFlow's raw
    ``UnavailableError`` ("failed to connect to all addresses", from tf_keras's
    ``backend._assign_value_to_variable`` at the next epoch's start) instead of
    :class:`ParameterServerError`."""
    import tf_keras

    for name in ("fit", "evaluate", "predict"):
        wrap_once(tf_keras.Model, name, _translating)


def _data_ran_out(strategy) -> int:
    """How many times the end of the data reached the user through ``strategy``'s
    coordinator (``HeteroCoordinator.data_ran_out``; 0 before it has one)."""
    return getattr(tfcompat.coordinator.coordinator_of(strategy), "data_ran_out", 0)


def _failovers(strategy) -> int:
    """How many PS failovers ``strategy``'s coordinator carried out (0 without failover)."""
    failover = getattr(tfcompat.coordinator.coordinator_of(strategy), "failover", None)
    return len(failover.events) if failover is not None else 0


def _translating(original):
    @functools.wraps(original)
    def call(self, *args, **kwargs):
        strategy = tfvars.model_variables_strategy(self)
        ours = fitplan.state_of(strategy) is not None
        ran_out = _data_ran_out(strategy) if ours else 0
        failovers = _failovers(strategy) if ours else 0
        try:
            result = original(self, *args, **kwargs)
        except Exception as e:  # pylint: disable=broad-except
            if not ours:
                raise  # not a tf-hetero strategy's model: stock behaviour
            failovers = _failovers(strategy) - failovers  # in this fit
            if failovers and not isinstance(e, ParameterServerError):
                raise ParameterServerError(
                    f"tf-hetero: this fit failed after {failovers} PS "
                    f"failover(s) in it ({type(e).__name__}: {str(e).splitlines()[0]}): what "
                    "ran on the old placement did not all recover (docs/FAILOVER.md, "
                    "Limits). Fix: resume from the last checkpoint (BackupAndRestore).") from e
            _raise_translated(e)
        # Keras ends a fit early when the data runs out and, when the step whose logs it
        # fetches last had run, returns as if it had finished (with a warning): the
        # strategy raises instead, whichever step Keras fetched.
        if ours and original.__name__ == "fit" and _data_ran_out(strategy) > ran_out:
            raise tf.errors.OutOfRangeError(None, None, RAN_OUT_FIT)
        return result

    return call
