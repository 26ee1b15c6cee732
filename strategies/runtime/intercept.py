"""The trace-time switch that makes a training step fill the round's accumulators: while a
step is traced under :func:`accumulating`, ``apply_gradients`` of every tf_keras optimizer
class (and ``apply`` of Keras 3's ``BaseOptimizer`` and ``LossScaleOptimizer``, when Keras 3
is loaded) adds the step's gradients to the round's accumulators instead of updating the variables
(:mod:`~tf_hetero.strategies.runtime.accumulate`, step 1 of its docstring), and a direct write
of a trainable variable (which would bypass the round) is recorded so that the tracer can
refuse the step.

The round's apply then calls the optimizer's own ``apply_gradients`` with the round's mean
gradient and the ``tf.Variable`` each accumulator belongs to: a Keras 3 optimizer takes
those as they are (its TensorFlow backend keys slots by the ``tf.Variable`` a Keras variable
holds), so one interception point per Keras flavour is all a round strategy needs.
"""

from __future__ import annotations

import contextlib
import threading

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.hooks import DEFERS_UPDATE

__all__ = ["accumulating", "patch_lock"]

#: Held while tf-hetero patches classes for a trace (one patched trace at a time; also held
#: around ``strategy.extended``'s scheduling flag, ``runtime/coordinator.py``, and while a
#: worker thread builds a per-worker resource, ``runtime/workers.build_serialized``: graph
#: building on several threads at once crashed TensorFlow, docs/TF_INTERNALS.md).
patch_lock = threading.RLock()


@contextlib.contextmanager
def accumulating(engine_accumulators_for, code: tf.Tensor):
    """While tracing: ``optimizer.apply_gradients`` accumulates into the round's lanes.

    Args:
      engine_accumulators_for: ``fn(optimizer, variables) -> Accumulators``.
      code: the int64 task-code tensor (:func:`~tf_hetero.strategies.runtime.taskcode.task_code`) of the function being traced.

    Yields a dict whose ``"calls"`` entry counts the intercepted ``apply_gradients`` calls
    (0 means the traced function is not a training step), ``"bytes"`` the size of the
    gradients one call pushes, ``"applied"`` each tf_keras ``apply_gradients`` call's
    ``(optimizer, variables)``, in call order, and ``"lossless"`` whether a call pushed no
    loss beside its gradients (a step calling ``apply_gradients`` itself: its round's apply
    reports no loss).
    """
    record = {"calls": 0, "bytes": 0, "writes": [], "loss": None, "applied": [],
              "lossless": False}
    with patch_lock:
        with _patched(_patches(_Interception(record, engine_accumulators_for, code))):
            with _watching_writes(record["writes"]):
                yield record


class _Interception:
    """The replacements :func:`accumulating` installs for one trace, all writing one
    ``record``: each is made by a method here and installed as a class attribute of an
    optimizer (or Keras 3 trainer) class, so its ``self`` is that class's instance."""

    def __init__(self, record: dict, accumulators_for, code: tf.Tensor):
        self.record, self.accumulators_for, self.code = record, accumulators_for, code

    def accumulate(self, optimizer, grads_and_vars):
        """The step's gradients into the round's lanes (with the step's loss, when known)."""
        record = self.record
        if not grads_and_vars:
            return optimizer.iterations
        record["calls"] += 1
        record["lossless"] = record["lossless"] or record["loss"] is None
        record["bytes"] += sum(v.shape.num_elements() * v.dtype.size for _, v in grads_and_vars)
        # Legacy optimizers create `iterations` on first use: do it outside control deps.
        iterations = optimizer.iterations
        acc = self.accumulators_for(optimizer, [v for _, v in grads_and_vars])
        with tf.control_dependencies([acc.accumulate(grads_and_vars, self.code,
                                                     record["loss"])]):
            return tf.identity(iterations)  # no increment: iterations counts rounds

    def apply_gradients(self):
        """tf_keras's ``apply_gradients``, every optimizer class."""
        record, accumulate = self.record, self.accumulate

        def apply_gradients(optimizer, grads_and_vars, name=None, **kwargs):
            grads_and_vars = list(grads_and_vars)
            # Every variable passed, None gradients included: what the optimizer's own first
            # apply_gradients would build its slots for (tfcompat.keras.build_optimizer).
            record["applied"].append((optimizer, [v for _, v in grads_and_vars]))
            return accumulate(optimizer, [(g, v) for g, v in grads_and_vars if g is not None])

        setattr(apply_gradients, DEFERS_UPDATE, True)  # its round applies: no emulated wait
        return apply_gradients

    def apply(self):
        """Keras 3's ``BaseOptimizer.apply`` (and ``LossScaleOptimizer.apply``)."""
        record, accumulate = self.record, self.accumulate

        def apply(optimizer, grads, trainable_variables=None):
            if trainable_variables is None:
                trainable_variables = tfcompat.keras3.tracked_variables(optimizer)
            try:
                return accumulate(optimizer, [(g, tfcompat.keras3.inner_variable(v))
                                              for g, v in zip(grads, trainable_variables)
                                              if g is not None])
            finally:
                record["loss"] = None  # the step's own (computing_loss): not the next step's

        setattr(apply, DEFERS_UPDATE, True)
        return apply

    def computing_loss(self, original):
        """Keras 3's train_step computes its loss with ``_compute_loss``, then applies: the
        loss goes into the lane beside the gradients, as ``minimize``'s does for tf_keras."""
        record = self.record

        def _compute_loss(trainer, *args, **kwargs):
            loss = original(trainer, *args, **kwargs)
            record["loss"] = loss if isinstance(loss, tf.Tensor) else None
            return loss
        return _compute_loss

    def minimizing(self, original):
        """tf_keras's train_step hands its loss to ``minimize``, which calls
        ``apply_gradients``: the loss goes into the lane beside the gradients (the round's
        loss, what StepCeiling reads; a step calling apply_gradients itself gives none)."""
        record = self.record

        def minimize(optimizer, loss, *args, **kwargs):
            record["loss"] = loss if isinstance(loss, tf.Tensor) else None
            try:
                return original(optimizer, loss, *args, **kwargs)
            finally:
                record["loss"] = None
        return minimize


def _patches(interception: _Interception) -> list:
    """``(class, attribute, replacement)`` for every class a trace's step may call (caller
    holds :data:`patch_lock`): each tf_keras optimizer class's ``apply_gradients`` and the
    ``minimize`` of the bases defining it; with Keras 3 loaded, ``BaseOptimizer.apply``,
    ``LossScaleOptimizer.apply`` and the trainer's ``_compute_loss``."""
    classes = tfcompat.keras.optimizer_classes()
    apply_gradients = interception.apply_gradients()
    patches = [(cls, "apply_gradients", apply_gradients) for cls in classes]
    # `minimize` is defined on a base of each (the new optimizer's `_BaseOptimizer`)
    owners = {next(k for k in cls.__mro__ if "minimize" in k.__dict__) for cls in classes}
    patches += [(cls, "minimize", interception.minimizing(cls.__dict__["minimize"]))
                for cls in owners]
    keras3 = tfcompat.keras3.loaded_optimizer_class()
    if keras3 is not None:
        apply = interception.apply()
        # A LossScaleOptimizer overrides `apply` (its inner optimizer's runs in a tf.cond,
        # where the accumulation cannot go): its step pushes the scaled gradients, and the
        # round's apply hands their mean to the LossScaleOptimizer's own `apply`, which
        # unscales them, or skips the round and lowers its scale (round_apply.py).
        trainer = tfcompat.keras3.loss_owner_class()
        patches += [(keras3, "apply", apply),
                    (tfcompat.keras3.loss_scale_optimizer_class(), "apply", apply),
                    (trainer, "_compute_loss",
                     interception.computing_loss(trainer.__dict__["_compute_loss"]))]
    return patches


@contextlib.contextmanager
def _patched(patches: list):
    """Sets each ``(owner, name, value)`` for the block; the owner's own attribute (from its
    ``__dict__``, not an inherited one) is set back after it."""
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


#: Variable methods that write a variable (a step must leave trainable ones to the optimizer).
_WRITE_METHODS = ("assign", "assign_add", "assign_sub", "scatter_add", "scatter_sub",
                  "scatter_update", "scatter_max", "scatter_min", "scatter_mul", "scatter_div",
                  "scatter_nd_add", "scatter_nd_sub", "scatter_nd_update",
                  "batch_scatter_update")


@contextlib.contextmanager
def _watching_writes(writes: list):
    """While tracing (caller holds :data:`patch_lock`): each write of a *trainable* variable
    in a graph being built, and each ``tf.compat.v1`` optimizer update, is appended to
    ``writes``. (Not "in this thread": ``strategy.run`` traces the replica function in a
    thread of its own. tf-hetero's own traces all hold the lock, so another trace of ours
    cannot interleave; eager writes elsewhere are not traces and are ignored.)

    Under a round strategy such a write would run at once on the PS, asynchronously, as under
    stock PSS, while the strategy claims rounds: the step tracer refuses the step instead
    (``StepTracer._refuse_direct_writes``). Metric and batch-norm statistics are not
    trainable and pass."""
    # ResourceVariable overrides some writes of its base (PSS's CachingVariable delegates
    # to a ResourceVariable): patch each class that defines one.
    originals = {(cls, name): cls.__dict__[name]
                 for cls in tfcompat.ops.resource_variable_classes()
                 for name in _WRITE_METHODS if name in cls.__dict__}
    v1_optimizer = tfcompat.ops.v1_optimizer_class()

    def watched(name, original):
        def write(self, *args, **kwargs):
            # Float only: Keras' step counters are int64 tf.Variables, trainable by default.
            if self.trainable and self.dtype.is_floating and not tf.executing_eagerly():
                writes.append(f"{self.name} ({name})")
            return original(self, *args, **kwargs)
        return write

    v1_apply = v1_optimizer.__dict__["apply_gradients"]

    def v1_apply_gradients(self, grads_and_vars, *args, **kwargs):
        if not tf.executing_eagerly():
            writes.append(f"{type(self).__name__}.apply_gradients (a tf.compat.v1 optimizer)")
        return v1_apply(self, grads_and_vars, *args, **kwargs)

    try:
        for (cls, name), original in originals.items():
            setattr(cls, name, watched(name, original))
        v1_optimizer.apply_gradients = v1_apply_gradients
        yield
    finally:
        for (cls, name), original in originals.items():
            setattr(cls, name, original)
        v1_optimizer.apply_gradients = v1_apply
