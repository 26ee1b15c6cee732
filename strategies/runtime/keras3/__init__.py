"""Keras 3 ``model.fit``, ``evaluate`` and ``predict`` on a parameter-server cluster
(stock ``tf.distribute.ParameterServerStrategy``, asynchronous; docs/KERAS3.md).

Keras 3's TensorFlow trainer has no parameter-server path. :func:`install` (what
``tf_hetero.keras3.enable()`` calls) wraps, once per process:

- ``TensorFlowTrainer.fit`` / ``evaluate`` / ``predict`` / ``predict_on_batch``: for a model
  whose ``distribute_strategy`` is a parameter-server strategy they run the loops of
  :mod:`.loop` (steps scheduled on the workers through the strategy's
  ``ClusterCoordinator``); for every other model, Keras's own method, unchanged.
  ``train_on_batch`` / ``test_on_batch`` under a parameter-server strategy are refused
  (they would run on the chief);
- the TensorFlow backend's ``Variable.assign_add`` / ``assign_sub``: atomic on a parameter
  server (:mod:`.variables`).

The decision is made per call, from the model's strategy; nothing changes for a model
trained without one. Every private Keras 3 name is reached through
:mod:`tf_hetero.tfcompat.keras3`.

Under a tf-hetero strategy the same loops run: its coordinator receives the closures
:mod:`.functions` makes through ``coordinator.schedule``, its step tracer intercepts Keras 3's
``BaseOptimizer.apply`` (and ``LossScaleOptimizer.apply``) as it does tf_keras's
``apply_gradients`` (:mod:`~tf_hetero.strategies.runtime.intercept`), and its rounds apply
through the Keras 3 optimizer. What the loops do not do for Keras 3 is refused before
training (:mod:`.checks`).
"""

from __future__ import annotations

import functools
import threading

from tf_hetero import tfcompat

__all__ = ["install", "installed"]

_lock = threading.Lock()
_installed = False


def installed() -> bool:
    """Has :func:`install` run in this process?"""
    return _installed


def _uses_ps(model) -> bool:
    return tfcompat.strategy.uses_coordinator(model.distribute_strategy)


def _routed(name: str):
    def make(original):
        @functools.wraps(original)
        def method(self, *args, **kwargs):
            if not _uses_ps(self):
                return original(self, *args, **kwargs)
            from tf_hetero.strategies.runtime import errors
            from tf_hetero.strategies.runtime.fitplan import state_of
            from tf_hetero.strategies.runtime.keras3 import checks, loop

            checks.check_strategy(self.distribute_strategy)
            if name in ("train_on_batch", "test_on_batch"):
                checks.refuse_on_batch(name)
            if state_of(self.distribute_strategy) is None:  # stock PSS: TF's own errors
                return getattr(loop, name)(self, *args, **kwargs)
            _attach_placement(self)  # before BackupAndRestore loads at the fit's start
            # A PS that died between two steps can be met first by an op the chief runs
            # itself (the loop's metric resets at an epoch's start): its raw UnavailableError
            # becomes ParameterServerError, as tf_keras's fit's does (runtime/errors.py).
            return errors.translated(getattr(loop, name), self, *args, **kwargs)

        return method

    make.__name__ = make.__qualname__ = f"on_parameter_servers_{name}"
    return make


def _attach_placement(model) -> None:
    """A rebalancing strategy's placement state hooks into the model's optimizer, so that a
    Keras 3 file saves and restores the placement (``PlacementState.attach_keras3``)."""
    optimizer = getattr(model, "optimizer", None)
    rebalancer = getattr(model.distribute_strategy, "rebalancer", None)
    if optimizer is not None and rebalancer is not None:
        rebalancer.state.attach_keras3(optimizer)


def _placing(original):
    @functools.wraps(original)
    def load_weights(self, *args, **kwargs):
        if _uses_ps(self):
            _attach_placement(self)
        return original(self, *args, **kwargs)

    return load_weights


_ROUTED = {name: _routed(name) for name in ("fit", "evaluate", "predict", "train_on_batch",
                                            "test_on_batch", "predict_on_batch")}


def install() -> None:
    """Makes Keras 3 train, evaluate and predict on a parameter-server cluster's workers
    (idempotent, thread-safe). Needs Keras 3 with the TensorFlow backend."""
    global _installed
    with _lock:
        if _installed:
            return
        version = tfcompat.keras3.version()
        import keras

        if not version.startswith("3.") or keras.backend.backend() != "tensorflow":
            raise RuntimeError(
                f"tf-hetero: Keras 3 with the TensorFlow backend is needed (installed: keras "
                f"{version}, backend {keras.backend.backend()!r}). Fix: pip install "
                "keras==3.15.1 and set KERAS_BACKEND=tensorflow (the default).")
        from tf_hetero.strategies.runtime.keras3 import variables

        for name, make in _ROUTED.items():
            tfcompat.keras3.wrap_trainer(name, make)
        tfcompat.keras3.wrap_model("load_weights", _placing)
        variables.install()
        _installed = True
