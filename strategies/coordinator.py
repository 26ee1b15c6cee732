"""``HeteroCoordinator``: the ``ClusterCoordinator`` that feeds ``model.fit``'s tasks to the
round engine, and the engine's dispatcher.

``model.fit`` schedules one closure per training step through the strategy's (cached)
coordinator. This subclass:

- traces each scheduled function once as an *accumulating* variant (see
  :mod:`tf_hetero.strategies.accumulate`); a function that calls ``apply_gradients`` is a
  training step and goes to the engine, anything else (evaluation, user functions) runs as
  stock TF would;
- dispatches a task pinned to one worker (the closure queue's tagged per-worker queues) or
  to any free worker (the shared queue), and schedules each round's apply;
- counts pinned closures as in flight itself (TF counts only shared-queue ones) and, when a
  worker fails, moves the closures pinned to it to the shared queue so live workers run them
  instead of waiting up to an hour for the dead one (TF_INTERNALS.md);
- reports every start, finish, apply, failure and recovery to the engine and the monitor.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

from tf_hetero.emulation import link_us_per_byte
from tf_hetero.engine import EngineError, RoundEngine
from tf_hetero.monitor import Monitor
from tf_hetero.strategies.accumulate import Accumulators, _patch_lock, accumulating, task_code
from tf_hetero.strategies.local_push import LocalBuffers

__all__ = ["HeteroCoordinator", "ParameterServerError"]

#: ``round_id`` of a task whose round closed before it started: it writes no gradient.
NO_ROUND = -1


class ParameterServerError(RuntimeError):
    """A parameter server became unreachable; its variables are lost."""


def _is_ps_failure(e: BaseException) -> bool:
    return isinstance(e, tf.errors.UnavailableError) and "/job:ps" in str(e)


def _translate(e: BaseException) -> BaseException:
    if _is_ps_failure(e):
        return ParameterServerError(
            f"A parameter server is unreachable ({type(e).__name__}: {str(e).splitlines()[0]}). "
            "Its variables are lost, so training cannot go on. Fix: restart the PS task, then "
            "resume from the last checkpoint: re-run model.fit with a "
            "tf_keras.callbacks.BackupAndRestore callback (or restore a ModelCheckpoint).")
    return e


class _Entry:
    """How the coordinator runs one scheduled function."""

    def __init__(self, accumulate_fn=None, is_train: bool = False, keep=None, accumulators=()):
        self.accumulate_fn = accumulate_fn
        self.is_train = is_train
        # The accumulators the step writes: a round applies only these (another model's
        # optimizer on this strategy must not run, even with zero gradients).
        self.accumulators = tuple(accumulators)
        # Functions traced only to inspect a step stay referenced here: garbage-collected in
        # the middle of fit, TF removes them from every server with blocking RPCs (seen:
        # seconds of stall).
        self.keep = keep


class HeteroCoordinator(cc.ClusterCoordinator):
    """The strategy's coordinator (TF caches one per strategy; ``__init__`` runs again on every
    ``ClusterCoordinator(strategy)`` call, so it returns early once initialised)."""

    def __init__(self, strategy):
        if getattr(self, "_has_initialized", False):
            return
        super().__init__(strategy)
        self._hetero = strategy._hetero_config  # pylint: disable=protected-access
        n = strategy.extended._num_workers  # pylint: disable=protected-access
        self.monitor: Monitor = strategy.monitor
        self.engine: RoundEngine | None = None
        if self._hetero.preset != "asp":
            self.engine = RoundEngine(n, self._hetero.sync, self._hetero.assign, dispatcher=self,
                                      gate=self._hetero.gate, monitor=self.monitor,
                                      late=self._hetero.late, transfer=self._hetero.transfer,
                                      extra_lanes=self._hetero.extra_lanes,
                                      local=self._hetero.local)
        self._entries: dict = {}
        self._accumulators: list[Accumulators] = []
        self._buffers: list[LocalBuffers] = []  # local accumulation (H-PS)
        self._last_accumulators: tuple = ()  # of the last training step scheduled
        self._accumulators_of: dict = {}  # task function -> the accumulators it writes
        self._drain_fns: dict = {}  # accumulators -> their push-only function (pipelined H-PS)
        self._apply_fns: dict = {}  # accumulators -> their round apply function
        self._code_tensors: dict[int, tf.Tensor] = {}
        self._attempt = threading.local()
        self._asp_version = 0
        self._asp_lock = threading.Lock()
        if self.engine is not None and self._hetero.tick_s:
            # Deadlines and task transfer need time to pass without any event.
            threading.Thread(target=self._tick_loop, args=(weakref.ref(self), self._hetero.tick_s),
                             daemon=True, name="tf-hetero-engine-tick").start()
        for worker in self._cluster.workers:
            self._instrument(worker)

    # ------------------------------------------------------------ public API
    def schedule(self, fn, args=None, kwargs=None):
        entry = self._entry(fn, args or (), kwargs or {})
        if not entry.is_train:
            return self._translated(super().schedule, fn, args=args, kwargs=kwargs)
        if self.engine is None:  # ASP: exactly what stock TF does, plus a mark for the monitor
            closure = self._closure(fn, args, kwargs)
            closure._tf_hetero_asp = True  # pylint: disable=protected-access
            remote_value = closure.build_output_remote_value()
            self._translated(self._cluster.closure_queue.put, closure)
            return remote_value
        self._last_accumulators = entry.accumulators
        if self.engine.rounds_mode:
            call = (entry.accumulate_fn, (self._code_tensor(NO_ROUND),) + tuple(args or ()), kwargs)
            closure = self._closure(*call)
            closure._tf_hetero_source = call  # pylint: disable=protected-access
        else:
            closure = self._closure(fn, args, kwargs)
        remote_value = closure.build_output_remote_value()
        self._make_fetch_start_rounds(remote_value)
        try:
            self.engine.submit(closure)  # dispatch() attaches the engine's Task to the closure
        except Exception as e:  # pylint: disable=broad-except
            self._error_reached_user()
            raise _translate(e) from e
        return remote_value

    def join(self):
        try:
            if self.engine is not None:
                self._wait_engine()
            self._translated(super().join)
        except Exception:
            self._error_reached_user()
            raise

    def done(self):
        """As stock TF's ``done``, and it lets a partial round start: a custom training loop
        that polls ``done()`` instead of calling ``join()`` must see its steps finish."""
        try:
            if self.engine is not None:
                self.engine.flush()
                self.engine.raise_if_error()
                if not self.engine.idle():
                    return False
            return self._translated(super().done)
        except Exception:
            self._error_reached_user()
            raise

    def _make_fetch_start_rounds(self, remote_value) -> None:
        """``fetch()``/``get()`` of a step's result first lets its round start (a round waits
        for enough steps, which a custom loop that fetches each step never schedules), then
        waits with the stall bound instead of forever."""
        original = remote_value._wait_and_maybe_error  # pylint: disable=protected-access
        ready = remote_value._status_available_event  # pylint: disable=protected-access
        coordinator = weakref.ref(self)

        def wait_and_maybe_error():
            this = coordinator()
            if this is not None and not ready.is_set():
                this.engine.flush()
                try:
                    this._wait_bounded(lambda: ready.wait(1.0))  # pylint: disable=protected-access
                except Exception:
                    this._error_reached_user()  # pylint: disable=protected-access
                    raise
            original()

        remote_value._wait_and_maybe_error = wait_and_maybe_error  # pylint: disable=protected-access

    def _error_reached_user(self) -> None:
        """An error was raised to the user: like TF's ``join``, forget it (and what it left
        queued), so the next ``fit`` on this strategy starts clean."""
        if self.engine is not None:
            self.engine.clear_error()
        queue = self._cluster.closure_queue
        with queue._queue_lock:  # pylint: disable=protected-access
            if queue._error is not None:  # pylint: disable=protected-access
                queue._cancel_all_closures()  # pylint: disable=protected-access
                queue._error = None  # pylint: disable=protected-access

    # -------------------------------------------------------------- dispatcher
    def dispatch(self, task, worker, round_id):
        closure = task.payload
        # Set here, before the put: a worker thread may pick the closure up at once (even
        # before engine.submit() has returned to schedule()).
        closure._tf_hetero_task = task  # pylint: disable=protected-access
        self._put(closure, worker)  # its task code is set when it starts (process_closure)

    def drain(self, worker):
        """A push-only closure: pushes ``worker``'s buffered gradients (pipelined H-PS), of
        the accumulators the last training step wrote."""
        accs = self._last_accumulators
        fn = self._drain_fns.get(accs)
        if fn is None:
            buffers = [b for b in self._buffers if b.acc in accs]
            strategy = self.strategy

            @tf.function
            def fn(code):
                return strategy.run(lambda: tf.reduce_any(tf.stack([b.drain(code) for b in buffers])))

            self._drain_fns[accs] = fn
            self._accumulators_of[fn] = accs
        closure = self._closure(fn, (self._code_tensor(NO_ROUND),), None)
        closure._tf_hetero_source = (fn, (), None)  # pylint: disable=protected-access
        return closure

    def duplicate(self, task):
        """A second closure of ``task``'s step (task transfer); it reads its own worker's data."""
        source = task.payload._tf_hetero_source  # pylint: disable=protected-access
        closure = self._closure(*source)
        closure._tf_hetero_source = source  # pylint: disable=protected-access
        return closure

    def dispatch_apply(self, round_id, lanes, folds):
        try:
            self._dispatch_apply(round_id, lanes, folds)
        except Exception as e:  # pylint: disable=broad-except
            self.engine.fail(_translate(e))  # e.g. the queue already holds a PS error

    def _dispatch_apply(self, round_id, lanes, folds):
        lanes_n = self.engine.num_lanes
        weights = np.zeros((lanes_n, 2), np.float32)
        expected = np.full((lanes_n, 2), -2, np.int64)
        for lane in lanes:
            weights[lane, round_id % 2], expected[lane, round_id % 2] = 1.0, round_id
        for (lane, slot), (late_round, weight) in folds.items():
            weights[lane, slot], expected[lane, slot] = weight, late_round
        closure = self._closure(self._round_apply_fn(self._round_accumulators(round_id, folds)),
                                (tf.constant(weights), tf.constant(expected)), None)
        closure._tf_hetero_apply = (round_id, closure.build_output_remote_value())  # pylint: disable=protected-access
        # Pin the apply to an idle worker, preferring one of the round's: a busy one (still
        # running a late or losing copy) would make the apply wait behind its task.
        idle = self.engine.idle_workers()
        preferred = [w for w in idle if w in lanes] or idle
        self._put(closure, preferred[0] if preferred else None)

    @staticmethod
    def _tick_loop(ref, period_s):
        """Ticks the engine every ``period_s`` while the coordinator exists (weak reference:
        the thread must not keep a finished strategy alive)."""
        while True:
            time.sleep(period_s)
            coordinator = ref()
            if coordinator is None:
                return
            try:
                if not coordinator.engine.idle():
                    coordinator.engine.tick()
            except Exception:  # pylint: disable=broad-except
                logging.getLogger("tf_hetero").exception("engine tick failed")
            del coordinator

    def cancel(self, task):
        task.payload.mark_cancelled()

    # --------------------------------------------------------------- internals
    def _translated(self, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except Exception as e:  # pylint: disable=broad-except
            translated = _translate(e)
            if translated is e:
                raise
            raise translated from e

    def _wait_engine(self):
        """Waits until the engine is idle, with the stall bound."""
        self._wait_bounded(lambda: self.engine.wait_idle(timeout=1.0))

    def _wait_bounded(self, wait_step) -> None:
        """Calls ``wait_step()`` (blocks at most ~1 s, True when the wait is over) until it
        is over, a worker raised (``join`` raises it), or no task or round finished in
        ``stall_timeout_s``."""
        stall = self._hetero.stall_timeout_s
        last_progress, last_count = time.monotonic(), -1
        while True:
            if self._cluster.closure_queue._error is not None:  # pylint: disable=protected-access
                return  # super().join() raises it
            try:
                if wait_step():
                    return
            except Exception as e:  # pylint: disable=broad-except
                if self._cluster.closure_queue._error is not None:  # pylint: disable=protected-access
                    return
                raise _translate(e) from e
            count = len(self.monitor.tasks) + len(self.monitor.rounds)
            if count != last_count:
                last_progress, last_count = time.monotonic(), count
            elif time.monotonic() - last_progress > stall:
                err = EngineError(
                    f"No task or round finished in {stall:.0f} s (live workers: "
                    f"{self.engine.live_workers}). Fix: check that the workers are running; "
                    "raise stall_timeout_s for very long tasks.")
                self.engine.fail(err)
                raise err

    def _closure(self, fn, args, kwargs):
        with self.strategy.scope():
            self.strategy.extended._being_scheduled = True  # pylint: disable=protected-access
            try:
                with _patch_lock:
                    return cc.Closure(fn, self._cluster.closure_queue._cancellation_mgr,  # pylint: disable=protected-access
                                      args=args, kwargs=kwargs)
            finally:
                self.strategy.extended._being_scheduled = False  # pylint: disable=protected-access

    def _code_tensor(self, code: int) -> tf.Tensor:
        """The int64 tensor of a task code (:func:`task_code`); NO_ROUND's is cached."""
        t = self._code_tensors.get(code)
        if t is None:
            t = tf.constant(code, tf.int64)
            if code < 0:
                self._code_tensors[code] = t
        return t

    def _entry(self, fn, args, kwargs) -> _Entry:
        entry = self._entries.get(fn)
        if entry is not None:
            return entry
        if self.engine is None or not self.engine.rounds_mode:
            entry = self._probe_entry(fn, args, kwargs)
        else:
            entry = self._accumulating_entry(fn, args, kwargs)
        self._entries[fn] = entry
        return entry

    def _probe_entry(self, fn, args, kwargs) -> _Entry:
        """Async presets run the step as written; a trace tells whether it trains."""
        python_fn = _autograph(fn)
        if python_fn is None:
            return _Entry(None, is_train=False)
        record, keep = self._trace_once(python_fn, args, kwargs,
                                        lambda opt, variables: _NullAccumulators())
        if record.get("calls", 0):
            self.monitor.bytes_per_push = record["bytes"]
        return _Entry(None, is_train=record.get("calls", 0) > 0, keep=keep)

    def _accumulating_entry(self, fn, args, kwargs) -> _Entry:
        python_fn = _autograph(fn)
        if python_fn is None:  # a concrete function: cannot re-trace it
            return _Entry(None, is_train=False)
        record = {}
        find = self._accumulators_for
        if self._hetero.local:
            self._make_buffers(python_fn, args, kwargs)
            find = self._buffers_for
        written = []

        def accumulators_for(optimizer, variables):
            found = find(optimizer, variables)
            written.append(found.acc if self._hetero.local else found)
            return found

        @tf.function
        def accumulate_fn(round_id, *a, **kw):
            with accumulating(accumulators_for, round_id) as rec:
                out = python_fn(*a, **kw)
            record.update(rec)
            return out

        keep = self._closure(accumulate_fn, (self._code_tensor(NO_ROUND),) + tuple(args), kwargs)
        accs = tuple(dict.fromkeys(written))
        self._accumulators_of[accumulate_fn] = accs
        return _Entry(accumulate_fn, is_train=record.get("calls", 0) > 0, keep=keep,
                      accumulators=accs)

    def _make_buffers(self, python_fn, args, kwargs) -> None:
        """Local accumulation: a first trace finds the step's optimizers and variables, so
        that their per-worker buffers exist before the real trace (they cannot be created
        while a step is traced)."""
        found = []

        def record(optimizer, variables):
            if "while" in tf.compat.v1.get_default_graph().name:
                raise ValueError(
                    f"{self._hetero.preset}: the training step runs several micro-batches "
                    "per task (compile(steps_per_execution > 1)), but local accumulation "
                    "sizes each worker's share in single micro-batch tasks. Fix: compile "
                    "with steps_per_execution=1 and set the strategy's round_tasks.")
            found.append((optimizer, list(variables)))
            return _NullAccumulators()

        _, self._probe_keep = self._trace_once(python_fn, args, kwargs, record)
        for optimizer, variables in found:
            acc = self._accumulators_for(optimizer, variables)
            if not any(b.acc is acc for b in self._buffers):
                self._buffers.append(LocalBuffers(
                    self.strategy, acc, self._hetero.codec, link_us_per_byte(self.strategy)))
        self.monitor.bytes_per_push = sum(b.bytes_per_push for b in self._buffers)
        self.monitor.push_times = self.monitor.push_times or []

    def _trace_once(self, python_fn, args, kwargs, accumulators_for):
        """Traces the step with ``apply_gradients`` routed to ``accumulators_for`` (inspection
        only). Returns what :func:`accumulating` recorded and the closure to keep alive."""
        record = {}

        @tf.function
        def traced(*a, **kw):
            with accumulating(accumulators_for, tf.constant(NO_ROUND, tf.int64)) as rec:
                out = python_fn(*a, **kw)
            record.update(rec)
            return out

        return record, self._closure(traced, args, kwargs)  # traces only

    def _buffers_for(self, optimizer, variables) -> LocalBuffers:
        """Local accumulation: the step adds into its worker's buffers."""
        for buffers in self._buffers:
            if buffers.acc.optimizer is optimizer and buffers.covers(variables):
                return buffers
        raise EngineError("a training step used variables that the first trace did not "
                          "see; local accumulation cannot buffer them.")

    def _accumulators_for(self, optimizer, variables) -> Accumulators:
        for acc in self._accumulators:
            if acc.optimizer is optimizer and acc.covers(variables):
                return acc
        with tf.init_scope():
            acc = Accumulators(self.strategy, variables, self.engine.num_workers,
                               self.engine.num_lanes)
        acc.optimizer = optimizer
        self._accumulators.append(acc)
        if not self._hetero.local:
            self.monitor.bytes_per_push = sum(a.bytes_per_push for a in self._accumulators)
        return acc

    def _round_accumulators(self, round_id, folds) -> tuple:
        """The accumulators written by the tasks of ``round_id`` and of the rounds whose late
        gradients it folds in (in creation order)."""
        rounds = {round_id} | {late for late, _ in folds.values()}
        written = set()
        for r in rounds:
            rnd = self.engine.rounds[r]
            for task in rnd.tasks + rnd.copies:
                fn = task.payload._tf_hetero_source[0]  # pylint: disable=protected-access
                written.update(self._accumulators_of.get(fn, ()))
        return tuple(a for a in self._accumulators if a in written)

    def _round_apply_fn(self, accumulators: tuple):
        fn = self._apply_fns.get(accumulators)
        if fn is None:
            fns = [a.make_apply_fn(a.optimizer) for a in accumulators]

            @tf.function
            def fn(weights, expected):
                counts = [f(weights, expected) for f in fns]
                return counts[0]

            self._apply_fns[accumulators] = fn
        return fn

    def _put(self, closure, worker):
        queue = self._cluster.closure_queue
        if worker is None:
            closure.tag = None
            try:
                queue.put(closure)  # raises the queue's error, if any
            except Exception as e:  # pylint: disable=broad-except
                self.engine.fail(_translate(e))
            return
        # Tagged closures are not counted in flight by TF (TF_INTERNALS.md); count them so
        # join() waits for them and mark_finished() balances.
        with queue._queue_lock:  # pylint: disable=protected-access
            queue.inflight_closure_count += 1
        queue.put(closure, tag=worker)

    # --------------------------------------------------- worker instrumentation
    def _instrument(self, worker):
        process, on_failure, on_recovery = (worker._process_closure, worker._on_closure_failure,  # pylint: disable=protected-access
                                            worker._on_worker_recovery)  # pylint: disable=protected-access
        w = worker.worker_index

        def process_closure(closure):
            task = getattr(closure, "_tf_hetero_task", None)
            apply = getattr(closure, "_tf_hetero_apply", None)
            self._attempt.failed = False
            asp = getattr(closure, "_tf_hetero_asp", False)
            # The tag only routed the closure here. TF's failure paths put a closure back with
            # put_back(), which asserts an untagged closure (and may bypass
            # _on_closure_failure, e.g. for transient PS errors).
            closure.tag = None
            start = time.perf_counter()
            if task is not None:
                fresh = self.engine.task_started(task, w)
                if task.round is not None:  # its round, lane and push flags are final now
                    code = task_code(task.round, task.lane, task.push) if fresh else NO_ROUND
                    closure._args = (self._code_tensor(code),) + tuple(closure._args[1:])  # pylint: disable=protected-access
            elif asp:
                with self._asp_lock:
                    version = self._asp_version
            process(closure)
            end = time.perf_counter()
            if self._attempt.failed:
                return  # the closure went back to the queue; another worker runs it
            error = self._cluster.closure_queue._error  # pylint: disable=protected-access
            if error is not None and self.engine is not None:
                self.engine.fail(_translate(error))
                return
            if task is not None:
                self.engine.task_finished(task, w)
                if self.engine.local and task.pushed and not task.stale:
                    self.monitor.record_push(end)
            elif apply is not None:
                round_id, remote_value = apply
                self.engine.apply_finished(round_id, int(round(float(remote_value.fetch()))))
            elif asp and error is None:
                with self._asp_lock:
                    staleness = self._asp_version - version
                    self._asp_version += 1
                self.monitor.record_task(w, start, end, applied=True, staleness=staleness)

        def on_closure_failure(closure, e):
            self._attempt.failed = True
            if self.engine is not None:
                self.engine.worker_failed(w)
            closure.tag = None  # put_back() asserts an untagged closure
            self._move_pinned_closures(w)
            on_failure(closure, e)

        def on_worker_recovery():
            on_recovery()
            if self.engine is not None:
                self.engine.worker_recovered(w)

        worker._process_closure = process_closure  # pylint: disable=protected-access
        worker._on_closure_failure = on_closure_failure  # pylint: disable=protected-access
        worker._on_worker_recovery = on_worker_recovery  # pylint: disable=protected-access

    def _move_pinned_closures(self, w: int) -> None:
        """Moves the train and apply closures queued for dead worker ``w`` to the shared queue."""
        queue = self._cluster.closure_queue
        if queue._error is not None:  # pylint: disable=protected-access
            return  # training is failing anyway (e.g. a PS died): nothing to rescue
        moved = []
        with queue._queue_lock:  # pylint: disable=protected-access
            tagged = queue._tagged_queue[w]  # pylint: disable=protected-access
            keep = []
            while not tagged.empty():
                c = tagged.get(block=False)
                ours = hasattr(c, "_tf_hetero_task") or hasattr(c, "_tf_hetero_apply")
                (moved if ours else keep).append(c)
            for c in keep:  # per-worker resource closures stay with their worker
                tagged.put(c, block=False)
            queue.inflight_closure_count -= len(moved)
        for c in moved:
            c.tag = None
            try:
                queue.put(c)
            except Exception as e:  # pylint: disable=broad-except
                if self.engine is not None:
                    self.engine.fail(_translate(e))
                return


def _autograph(fn):
    """The Python function behind a tf.function, converted by AutoGraph as tf.function would.

    Keras' multi-step train function loops with ``for _ in tf.range(steps_per_execution)``,
    which needs AutoGraph; calling ``fn.python_function`` from our own tf.function does not
    convert it (measured: "Iterating over a symbolic tf.Tensor is not allowed").
    """
    python_fn = getattr(fn, "python_function", None)
    if python_fn is None:
        return None
    return tf.autograph.to_graph(python_fn) if getattr(fn, "_autograph", True) else python_fn


class _NullAccumulators:
    def accumulate(self, grads_and_vars, round_id):
        return tf.no_op()
