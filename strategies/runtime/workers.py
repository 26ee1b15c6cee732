"""Worker-thread hooks: what happens around each closure a coordinator worker thread runs.

:func:`instrument` wraps four methods of each TF ``Worker`` (``_process_closure``,
``_on_closure_failure``, ``_on_worker_recovery``, ``_process_resource_closure``) so that the
engine hears of every start, finish, apply, failure and recovery, a task learns its final
round/slot/lane/push flags (its task code) as it starts, closures pinned to a dead worker
move to the shared queue (TF would wait up to an hour for the dead one; docs/TF_INTERNALS.md),
and a per-worker resource (a fit's iterator) is built under the lock every trace of
tf-hetero's holds (:func:`build_serialized`). A closure TF puts back
on its queue (a worker failure, or a failure it deems transient, e.g. a PS briefly
unreachable) is no end of its task: the task starts again where the closure runs next.
"""

from __future__ import annotations

import functools
import threading
import time

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.engine import OVERWRITE
from tf_hetero.strategies.runtime.taskcode import NO_ROUND, task_code
from tf_hetero.strategies.runtime.dispatcher import hand_on
from tf_hetero.strategies.runtime.errors import translate
from tf_hetero.strategies.runtime.intercept import patch_lock
from tf_hetero.strategies.runtime.tags import ClosureKind, tag_of

__all__ = ["instrument", "move_pinned_closures", "build_serialized"]


class _AsyncVersions:
    """Applied-update count of the ASP path (no engine), for the staleness it records."""

    def __init__(self):
        self.lock = threading.Lock()
        self.version = 0


def instrument(coordinator) -> None:
    """Installs the hooks on every worker of ``coordinator``."""
    attempt = threading.local()
    versions = _AsyncVersions()
    _instrument_queue(coordinator, attempt)
    for worker in tfcompat.coordinator.workers_of(coordinator):
        _instrument(coordinator, worker, attempt, versions)


def _instrument_queue(coordinator, attempt) -> None:
    """Replaces the closure queue's ``mark_failed`` and ``put_back``; both tell the worker
    thread (``attempt``) what happened to its closure.

    A closure of a fit whose error already reached the user may still fail afterwards
    (the other workers' closures of that fit were running when the first one failed, or
    still queued for their worker: TF's cancel does not empty the per-worker queues). TF's
    ``mark_failed`` would make that echo the queue's error, and the *next* fit would raise it
    at its first ``schedule``. The wrapped ``mark_failed`` counts such a closure out without
    keeping its error (stock TF keeps it: its next ``fit`` can fail with the last one's error).
    It reads ``coordinator.errors_reached_user`` under the queue's lock, and the coordinator
    clears the queue's error after counting, so either the echo is dropped here or it is set
    before, and then cleared with the error the user got.

    ``put_back`` says whether TF put the closure back to run again or cancelled it (the queue
    holds an error): a transient failure (e.g. a PS briefly unreachable) reaches no failure
    hook, and the task must not end with that attempt (``process_closure``)."""

    def seen(e):
        attempt.error = e

    def keep_error(e):  # asked under the queue's lock
        failover = coordinator.failover
        if failover is not None and failover.can_take(e):
            return False  # the failover takes it (process_closure): the fit goes on
        fit = getattr(attempt, "errors_seen", None)
        return fit is None or fit == coordinator.errors_reached_user

    queue = tfcompat.coordinator.queue_of(coordinator)
    queue.replace_mark_failed(keep_error, seen)

    def put_back(requeued):  # on the worker thread whose closure TF puts back
        attempt.put_back = "requeued" if requeued else "cancelled"

    queue.replace_put_back(put_back)


def _instrument(coordinator, worker, attempt, versions):
    hooks = _ClosureHooks(coordinator, worker.worker_index, attempt, versions)
    tfcompat.coordinator.hook_worker(
        worker, process_closure=lambda tf_fn: functools.partial(hooks.process_closure, tf_fn),
        on_closure_failure=lambda tf_fn: functools.partial(hooks.on_closure_failure, tf_fn),
        on_worker_recovery=lambda tf_fn: functools.partial(hooks.on_worker_recovery, tf_fn),
        process_resource_closure=lambda tf_fn: functools.partial(build_serialized, tf_fn))


def build_serialized(process, closure) -> None:
    """TF's ``_process_resource_closure`` with the resource built under :data:`patch_lock`.

    Why: at a fit's start TF builds each worker's multi-device iterator on that worker's
    thread (tracing its ``_remote_init_func``) while the main thread traces the step, and
    graph building on several threads at once crashed the process three times in ~50 suite
    runs (a segmentation fault in ``Graph._add_function`` or ``EagerTensor._numpy``;
    docs/TF_INTERNALS.md). Every trace of tf-hetero's (a step's closure, an apply, an
    intercepted step) holds the lock already; so builds and traces run one at a time. The
    lock is held only while the resource is built, not in TF's recovery wait around it."""
    tfcompat.coordinator.execute_holding(closure, patch_lock)
    process(closure)


class _ClosureHooks:
    """The hooks of worker ``w``'s thread: each wraps TF's own method (passed first)."""

    def __init__(self, coordinator, w: int, attempt, versions):
        self.coordinator, self.w, self.attempt, self.versions = coordinator, w, attempt, versions
        self.engine, self.monitor = coordinator.engine, coordinator.monitor
        self.queue = tfcompat.coordinator.queue_of(coordinator)
        self.local = coordinator.config.local is not None

    def went_back(self) -> bool:  # TF put the closure back on its queue: it runs again
        return self.attempt.failed or self.attempt.put_back == "requeued"

    def error_of_attempt(self):  # what the closure that ran ended with (None: it returned)
        error = self.attempt.error or self.queue.error
        if error is None and self.attempt.put_back == "cancelled":  # the fit's error: cleared
            error = tf.errors.CancelledError(None, None, "closure cancelled")
        return error

    def process_closure(self, process, closure):
        tag = tag_of(closure)
        task = tag.task if tag is not None and tag.kind == ClosureKind.TASK else None
        start = time.perf_counter()
        fit, version = self._begin(closure, tag, task)
        if not self._run(process, closure, tag, fit):
            return  # made again by the recovery, whose result ends this one's
        end = time.perf_counter()
        if self.went_back():
            # The closure went back to the queue (a worker failure, or a failure TF deems
            # transient, e.g. a PS briefly unreachable, which bypasses
            # _on_closure_failure): it runs again, and its task starts again there.
            return
        error = self.error_of_attempt()
        if error is not None and self.engine is not None:
            self._failed(closure, tag, task, fit, error)
        else:
            self._ended(closure, tag, task, fit, error, (start, end), version)

    def _begin(self, closure, tag, task):
        """Before TF runs the closure: returns the fit it was made in and, for an
        asynchronous step, the update count it starts from."""
        attempt, engine = self.attempt, self.engine
        attempt.failed, attempt.put_back = False, None
        # The tag only routed the closure here. TF's failure paths put a closure back with
        # put_back(), which asserts an untagged closure (and may bypass
        # _on_closure_failure, e.g. for transient PS errors).
        closure.tag = None
        # The fit the closure was made in, not the one running when it starts: a closure of
        # a failed fit still queued for its worker starts after the error reached the user
        # (CI: failures-backup's fit 2 raised a CancelledError of fit 1's accumulate step).
        fit = tag.fit if tag is not None and tag.fit is not None else \
            self.coordinator.errors_reached_user
        attempt.errors_seen, attempt.error = fit, None
        version = None
        if task is not None:
            fresh = engine.task_started(task, self.w)
            if task.round is not None:  # its round, slot, lane and push flags are final now
                slot = engine.rounds[task.round].slot
                flags = task.push | (OVERWRITE if task.overwrite else 0)
                code = (task_code(task.round, task.lane, flags, slot, task.size)
                        if fresh else NO_ROUND)
                tfcompat.coordinator.set_first_arg(closure, self.coordinator.code_tensor(code))
            task.t_call = time.perf_counter()  # a round profile's start | launch boundary
        elif tag is not None and tag.kind == ClosureKind.ASYNC:
            with self.versions.lock:
                version = self.versions.version
        return fit, version

    def _run(self, process, closure, tag, fit) -> bool:
        """TF's own ``_process_closure``; False if a failover made the step again."""
        coordinator, attempt = self.coordinator, self.attempt
        steps = coordinator.failover.steps if (
            self.engine is None and tag is not None and coordinator.failover is not None) \
            else None
        if steps is None:
            with coordinator.losses.copying(closure):  # a round's task: its result stays
                process(closure)
            return True
        # ASP under failover: the step counts, may take the copy, or is failed over
        steps.step_begins()
        attempt.open_step = steps
        try:
            process(closure)
        finally:
            if attempt.open_step is not None:  # not ended by a worker failure already
                attempt.open_step = None
                ran = not self.went_back()
                if steps.step_ends(closure, self.error_of_attempt() if ran else None,
                                   fit == coordinator.errors_reached_user, ran=ran):
                    return False
        return True

    def _failed(self, closure, tag, task, fit, error) -> None:
        """A round strategy's closure ended with ``error``."""
        engine, losses = self.engine, self.coordinator.losses
        failover = self.coordinator.failover
        if failover is not None and fit == engine.generation and failover.take(error):
            # A PS died: the failover restarts the rounds (this task's among them)
            if tag is not None and tag.output is not None:
                losses.forget(closure)
            return
        if task is not None:
            engine.task_failed(task, self.w, translate(error), since=fit)
        else:
            engine.fail(translate(error), since=fit)  # stale if the user got it
        if tag is not None and tag.output is not None:
            losses.forget(closure)  # no loss to check: it failed

    def _ended(self, closure, tag, task, fit, error, span, version) -> None:
        """The closure ended: a round strategy's without error, or an ASP step's."""
        coordinator = self.coordinator
        if task is not None:
            self.engine.task_finished(task, self.w)
            # the steps its round absorbed end with its result (copied to the chief for
            # the one fit holds, if its last step was absorbed)
            hand_on(closure, copy_when=coordinator.losses.held)
            if self.local and task.pushed and not task.stale:
                self.monitor.record_push(span[1])
        elif tag is not None and tag.kind == ClosureKind.ASYNC and error is None:
            with self.versions.lock:
                staleness = self.versions.version - version
                self.versions.version += 1
            self.monitor.record_task(self.w, *span, applied=True, staleness=staleness)
            hand_on(closure)  # a step a failover made again: the one fit holds ends too
        elif error is not None and self.engine is None and coordinator.failover is not None \
                and fit == coordinator.errors_reached_user:
            # ASP under failover, an error the failover did not take (a death it cannot
            # recover from): the queue did not keep it (keep_error), so it is set here.
            self.queue.fail(translate(error))
        if tag is not None and tag.output is not None:  # an asynchronous step: its loss
            coordinator.losses.finished(closure, self.w)

    def on_closure_failure(self, on_failure, closure, e):
        self.attempt.failed = True
        steps = getattr(self.attempt, "open_step", None)
        if steps is not None:
            # ASP under failover: this worker died, TF puts its step back and waits for the
            # worker to come back: the step no longer runs (a recovery need not wait for it).
            self.attempt.open_step = None
            steps.step_ends(closure, None, ran=False)
        if self.engine is not None:
            self.engine.worker_failed(self.w)
        closure.tag = None  # put_back() asserts an untagged closure
        move_pinned_closures(self.coordinator, self.w)
        on_failure(closure, e)

    def on_worker_recovery(self, on_recovery):
        on_recovery()
        if self.engine is not None:
            self.engine.worker_recovered(self.w)


def move_pinned_closures(coordinator, w: int) -> None:
    """Moves the task closures queued for dead worker ``w`` to the shared queue."""
    queue = tfcompat.coordinator.queue_of(coordinator)
    engine = coordinator.engine
    if queue.error is not None:
        return  # training is failing anyway (e.g. a PS died): nothing to rescue

    def ours(c):  # per-worker resource closures stay with their worker
        tag = tag_of(c)
        return tag is not None and tag.kind == ClosureKind.TASK

    for c in queue.take_pinned(w, ours):
        c.tag = None
        try:
            queue.raw.put(c)
        except Exception as e:  # pylint: disable=broad-except
            if engine is not None:
                engine.fail(translate(e))
            return
