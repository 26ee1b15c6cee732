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
- A round's task whose loss goes to the PS beside its gradients (tf_keras's ``minimize``,
  Keras 3's ``_compute_loss``; not a step calling ``apply_gradients`` itself, not local
  accumulation) is checked by its round instead: the round's apply reports the mean loss
  of its batch (:meth:`LossWatch.round_applied`), so the task's result stays on its worker
  (:meth:`LossWatch.copying`). That copy was a round trip on the worker's thread after every
  task, and the one transfer seen to hang (docs/TF_INTERNALS.md, "A hang seen twice").
  The result is still held: its values end the steps the round absorbed (``hand_on``).
  The result of the step scheduled last, which ``fit`` holds for its logs, is copied by its
  worker's thread as TF would, if it is still the last once its step has run (an epoch's
  last step; :meth:`LossWatch.copying`; absorbed, by the thread of the task whose result
  ends it: ``hand_on``), so a worker lost after that step does not take it along;
  ``join`` copies it if that did not happen (:meth:`LossWatch.flush`); a custom loop's
  other results are copied when it reads them.
"""

from __future__ import annotations

import contextlib
import math
import threading
import weakref

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
        #: A round's task whose loss reaches its apply is checked by its round, its result
        #: left on its worker. False: every task's result is copied and checked, as before
        #: (benchmarks/result_copy.py measures what the copies cost).
        self.by_round = True
        #: The result of the step scheduled last (a weak reference): ``fit`` holds it for
        #: its logs. Its worker thread copies it to the chief as TF would, if it is still
        #: the last one when its step has run (:meth:`copying`: an epoch's last step, whose
        #: worker may die before ``fit`` reads it), and ``join`` copies it if not yet. (Not
        #: every result left: the wrapped fetch keeps each alive until the garbage collector
        #: runs, so "still alive" does not mean "still held".)
        self.last_left = None

    def keep(self, closure, remote_value, *, by_round: bool = False) -> None:
        """Holds ``remote_value`` (the step's result) until a worker ran ``closure``.
        ``by_round``: the step's loss is checked by its round (:meth:`round_applied`),
        and the result is not copied to the chief (:meth:`copying`)."""
        with self.lock:
            by_round = by_round and self.by_round
            tag_of(closure).output = (self.generation, remote_value, not by_round)
            self.outstanding += 1
            if by_round:
                self.last_left = weakref.ref(remote_value)

    def copying(self, closure):
        """Around a worker thread's run of ``closure``: TF's copy of its result to the
        chief, unless its round checks its loss (:func:`~tf_hetero.tfcompat.coordinator.
        result_left_on_worker`) and ``fit`` has scheduled a step after it by the time it
        has run. The step scheduled last keeps TF's copy: a worker lost after an epoch's
        last step ran would otherwise take ``fit``'s logs along (chaos, a worker killed
        between that step and ``join``: ``fit`` raised ``UnavailableError``)."""
        tag = tag_of(closure)
        kept = tag.output if tag is not None else None
        if kept is None or kept[2]:
            return contextlib.nullcontext()
        return tfcompat.coordinator.result_left_on_worker(closure, copy_when=self.held)

    def held(self, remote_value) -> bool:
        """Whether ``remote_value`` is the result of the step scheduled last."""
        last = self.last_left
        return last is not None and last() is remote_value

    def round_applied(self, round_id: int, loss: float, steps: int = 1) -> None:
        """Round ``round_id``'s apply reported the mean ``loss`` of its batch, ``steps`` of
        fit's steps: checked as a step's is (NaN: a task of it pushed no loss, and its own
        result is checked; or a gradient that was not finite, which the engine's gradient
        check reports)."""
        if self.by_round and math.isfinite(loss):
            self._check(self.generation, loss, (round_id, steps))

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
        (generation, remote_value, copied), tag.output = tag.output, None
        loss = _loss_of(tfcompat.coordinator.fetched_tensors(remote_value)) if copied else None
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
            last, self.last_left = self.last_left, None
        for generation, loss in pending:
            self._check(generation, loss)
        if last is not None:
            try:
                tfcompat.coordinator.copy_to_chief(last())
            except Exception:  # pylint: disable=broad-except
                pass  # its worker is gone: fit's own read of it raises that, translated

    def _check(self, generation: int, loss, round_of: tuple | None = None) -> None:
        """Checks ``loss``: a step's copied tensor (steps are counted), or the float of a
        round (``round_of``: its id and its steps)."""
        if generation != self.generation:
            return
        value = float(loss.numpy()) if isinstance(loss, tf.Tensor) else float(loss)
        with self.lock:
            if generation != self.generation:
                return
            step, self.steps = self.steps, self.steps + 1
            if round_of is None:
                why = self.guard.check(step, value)
            else:
                why = self.guard.check(round_of[0], value, unit="round", steps=round_of[1])
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
