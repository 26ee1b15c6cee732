"""The loss check of every training step: a diverging or collapsed fit stops.

Round strategies also check each round's mean gradient in its apply (the engine's
:class:`~tf_hetero.policies.diverge.DivergenceGuard`). Asynchronous steps (ASP; an
``EngineConfig`` with async sync and a gate) update the variables on their worker, as stock
TF does, so for them the loss is the only check. Every strategy's steps go through the loss
check, which also sees a collapse (the loss back at its start after it came down: finite,
small gradients; policies/diverge.py). The loss is the one each step returns
(``model.fit``'s logs, or a custom step's scalar result):

- ``schedule`` keeps the step's result on its closure tag (:meth:`LossWatch.keep`). TF's
  worker thread copies a closure's result to the chief after running it, but only while
  someone holds the result; ``model.fit`` drops each step's result when it schedules the
  next, long before a worker runs it.
- After the worker ran the step, :meth:`LossWatch.finished` keeps the copied loss (a scalar)
  and hands it to a :class:`~tf_hetero.policies.diverge.LossGuard` at the worker's next step
  or at ``join`` (:meth:`LossWatch.flush`). A NaN/Inf or exploding
  loss fails the fit with a :class:`~tf_hetero.policies.diverge.DivergenceError`: through the
  engine (async under a gate), or as the closure queue's error (ASP), which ``fit``'s next
  ``schedule`` or ``join`` raises as TF raises a worker's error.
"""

from __future__ import annotations

import threading

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.policies.diverge import DivergenceError, LossGuard
from tf_hetero.strategies.runtime.errors import fail_fit
from tf_hetero.strategies.runtime.tags import tag_of

__all__ = ["LossWatch"]


class LossWatch:
    """Checks every training step's loss (one per coordinator)."""

    def __init__(self, coordinator, applied_on_worker: bool = True):
        self.coordinator = coordinator
        self.guard = LossGuard(applied_on_worker=applied_on_worker)
        self.lock = threading.Condition()
        self.steps = 0
        # Steps scheduled before the last reset are not checked: the fit they belonged to
        # has failed (they may still finish after the error reached the user) or ended.
        self.generation = 0
        self.pending: dict = {}  # worker -> (generation, loss tensor) not checked yet
        self.outstanding = 0  # steps of this generation kept and not finished yet

    def keep(self, closure, remote_value) -> None:
        """Holds ``remote_value`` (the step's result) until a worker ran ``closure``."""
        with self.lock:
            tag_of(closure).output = (self.generation, remote_value)
            self.outstanding += 1

    def reset(self) -> None:
        """A new ``fit``, or a divergence reached the user: a new reference loss."""
        with self.lock:
            self.guard.reset()
            self.steps = 0
            self.generation += 1
            self.pending, self.outstanding = {}, 0

    def forget(self, closure) -> None:
        """``closure`` will not run (its step was absorbed into a round whose other tasks
        read its samples): no loss of its own to wait for."""
        tag = tag_of(closure)
        with self.lock:
            kept, tag.output = tag.output, None
            if kept is not None and kept[0] == self.generation:
                self.outstanding -= 1
                self.lock.notify_all()

    def finished(self, closure, worker: int) -> None:
        """``closure`` ran on ``worker``: its loss is checked at that worker's next step (or
        at ``join``), by when the copy to the chief has arrived: reading it now would hold
        the worker's thread for a round trip (measured: ~4% of throughput at 20 ms steps)."""
        tag = tag_of(closure)
        (generation, remote_value), tag.output = tag.output, None
        loss = _loss_of(tfcompat.coordinator.fetched_tensors(remote_value))
        with self.lock:
            earlier = self.pending.pop(worker, None)
            if generation == self.generation:
                self.outstanding -= 1
                self.lock.notify_all()
                if loss is not None:
                    self.pending[worker] = (generation, loss)
        if earlier is not None:
            self._check(*earlier)

    def flush(self, timeout_s: float = 5.0) -> None:
        """Checks the losses not checked yet (``join``: the fit's last steps). TF counts a
        step finished before its worker thread hands it here: waits (at most
        ``timeout_s``) for those hand-overs."""
        queue = tfcompat.coordinator.queue_of(self.coordinator)
        with self.lock:
            # A step that failed hands nothing over: once TF holds an error the fit raises
            # it, and waiting for those hand-overs cost every failing fit the whole bound.
            self.lock.wait_for(lambda: self.outstanding <= 0 or queue.error is not None,
                               timeout=timeout_s)
            pending, self.pending = list(self.pending.values()), {}
        for generation, loss in pending:
            self._check(generation, loss)

    def _check(self, generation: int, loss) -> None:
        if generation != self.generation:
            return
        value = float(loss.numpy())
        with self.lock:
            if generation != self.generation:
                return
            step, self.steps = self.steps, self.steps + 1
            why = self.guard.check(step, value)
            if why is not None:
                self.generation += 1  # one error per fit: later steps are not checked
        if why is None:
            return
        hint = self.coordinator.tracer.describe_learning_rates()
        error = DivergenceError(
            f"tf-hetero: training diverged: {why}. Fix: lower the learning rate"
            f"{' (' + hint + ')' if hint else ''}, or warm it up over the first steps.")
        fail_fit(self.coordinator, error)


def _loss_of(result):
    """The loss in a step's fetched result: Keras logs' ``"loss"``, or a scalar float."""
    if isinstance(result, dict):
        result = result.get("loss")
    if isinstance(result, tf.Tensor) and result.dtype.is_floating and result.shape.rank == 0:
        return result
    return None
