"""``HeteroCoordinator``: the ``ClusterCoordinator`` that feeds ``model.fit``'s tasks (and a
custom training loop's) to the round engine. Wiring only; the work is done by

- :mod:`~tf_hetero.strategies.runtime.tracing` -- is a scheduled function a training step,
  and its accumulating variant;
- :mod:`~tf_hetero.strategies.runtime.dispatcher` -- the engine's Dispatcher: closures on
  TF's queues, round applies;
- :mod:`~tf_hetero.strategies.runtime.workers` -- worker-thread hooks (start, finish,
  failure, recovery);
- :mod:`~tf_hetero.strategies.runtime.watchdog` -- bounded waits and the engine ticker.

TF caches one coordinator per strategy and re-runs ``__init__`` on every
``ClusterCoordinator(strategy)`` call, so ``__init__`` returns early once initialised.
"""

from __future__ import annotations

import functools
import threading
import weakref

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.engine import RoundEngine
from tf_hetero.strategies.runtime import (arrays, callbacks, errors, fitplan, granules, watchdog,
                                          workers)
from tf_hetero.strategies.runtime.divergence import LossWatch
from tf_hetero.strategies.runtime.intercept import patch_lock
from tf_hetero.strategies.runtime.taskcode import NO_ROUND
from tf_hetero.strategies.runtime.applier import ChiefApplier
from tf_hetero.strategies.runtime.closures import ClosureCache
from tf_hetero.strategies.runtime.dispatcher import ClosureDispatcher
from tf_hetero.strategies.runtime.errors import ParameterServerError, translate, translated
from tf_hetero.strategies.runtime.tags import ClosureKind, ClosureTag, set_tag, tag_of
from tf_hetero.strategies.runtime.tracing import StepTracer

__all__ = ["HeteroCoordinator", "ParameterServerError", "shutdown"]


class HeteroCoordinator(tfcompat.coordinator.ClusterCoordinator):
    """The strategy's coordinator: ``schedule``/``join``/``done`` as stock TF, with training
    steps going through the round engine (``None`` when the config needs none: ASP)."""

    def __init__(self, strategy):
        if tfcompat.coordinator.initialized(self):
            return
        super().__init__(strategy)
        self.config = strategy.config
        self.monitor = strategy.monitor
        self.engine: RoundEngine | None = None
        self._code_tensors: dict[int, tf.Tensor] = {}
        self.closures = ClosureCache()  # closures of a function on the same arguments: copies
        if self.config.uses_engine:
            self.engine = RoundEngine(
                tfcompat.strategy.num_workers(strategy), self.config.sync, self.config.assign,
                gate=self.config.gate, monitor=self.monitor, components=self.config.components,
                grouping=self.config.grouping, update_scale=self.config.update_scale)
        #: Live rebalancing (strategy ``rebalance=``; strategies/runtime/rebalance.py) or None.
        self.rebalancer = None
        #: PS failover (``HeteroStrategy.set_failover``; strategies/runtime/failover.py) or None.
        self.failover = None
        self._kept_traces: list = []  # functions traced on a placement since left (alive)
        self._current: dict = {}  # ASP: id(fn) -> (fn, placement generation, its copy)
        self.stopped = False  # shutdown() was called: the ticker ends, nothing is scheduled
        fitplan.install()  # each fit's first step says how many updates the fit makes
        granules.install()  # evaluation data stays in whole batches (sized strategies)
        arrays.install()  # tf_keras's own pipelines from arrays: no autotuning (deletion)
        callbacks.install()  # a callback that cannot run under PSS fails before the fit
        errors.install()  # a PS failure the chief's own ops meet in fit: the clear error
        self.tracer = StepTracer(self)
        self.applier = ChiefApplier(self)
        self.dispatcher = ClosureDispatcher(self, self.tracer)
        self._async_errors = 0  # errors that reached the user, without an engine (ASP)
        #: The fit (:attr:`errors_reached_user`) whose error to the user was the end of the data.
        self.ran_out_in = None
        #: How many times the end of the data reached the user (Keras caught it and ended its
        #: fit early): a fit that returns after one more raises (errors.install).
        self.data_ran_out = 0
        # Every training step's loss: a diverging or collapsed fit stops (runtime/divergence.py).
        # (A strategy that switches to asynchronous steps may apply a step's NaN itself.)
        self.losses = LossWatch(self, applied_on_worker=(
            self.engine is None or not self.engine.rounds_mode or self.config.switches_modes))
        # Deadlines and task transfer need time to pass: a ticker runs while the engine has
        # work (started by schedule, ends once idle).
        self.ticker, self.ticker_lock = None, threading.Lock()
        if self.engine is not None:
            self.engine.dispatcher = self.dispatcher
            self.engine.describe_lr = self.tracer.describe_learning_rates
        workers.instrument(self)

    # ------------------------------------------------------------ public API
    def schedule(self, fn, args=None, kwargs=None):
        failover = self.failover
        if failover is None:
            return self._schedule(fn, args, kwargs)
        for attempt in range(2):
            failover.wait_ready()  # a recovery in progress: the step is made after it
            try:
                with failover.lock:  # and none is made on the old placement during one
                    return self._schedule(fn, args, kwargs)
            except Exception as e:  # pylint: disable=broad-except
                # A PS death met here, on fit's thread (a rebalancing move at the round
                # boundary this step waited for, reading the dead task): failed over like
                # one a closure meets (the lock released first: the recovery takes it),
                # then this step is made again, once, on the new placement.
                if attempt or not failover.take(e):
                    raise
        raise AssertionError("unreachable")

    def _schedule(self, fn, args, kwargs):
        if self.rebalancer is not None and fn not in self.tracer.entries:
            self.rebalancer.before_trace()  # decision 0 may move variables before the trace
        entry = self.tracer.entry(fn, args or (), kwargs or {})
        if entry.is_train and self.rebalancer is not None:  # may move variables: re-traced
            entry = self.rebalancer.before_task(fn, args or (), kwargs or {}, entry)
        if not entry.is_train:
            return translated(super().schedule, fn, args=args, kwargs=kwargs)
        model = fitplan.fit_model(self.strategy)
        plan = fitplan.take_plan(self.strategy)
        if plan is not None:  # a fit starts
            self.losses.reset()
            self.strategy.fit_starts(model)  # may refuse the fit, before its first step
        if plan is not None and self.engine is not None and (
                self.engine.rounds_mode or self.config.switches_modes):
            line = self.strategy.fit_line(plan)
            if line:
                print(line, flush=True)
        if self.engine is None:  # ASP: exactly what stock TF does, plus a tag for the monitor
            if plan is not None and self.failover is not None:
                self.failover.steps.fit_starts(getattr(model, "optimizer", None) or next(
                    iter(self.tracer.optimizers), None))
            closure = self.closure(self.current_function(fn), args, kwargs)
            set_tag(closure, ClosureTag(ClosureKind.ASYNC, fit=self.errors_reached_user,
                                        source=(fn, args, kwargs)))
            remote_value = closure.build_output_remote_value()
            self.losses.keep(closure, remote_value)
            self._wrap_fetch(remote_value)
            try:
                translated(tfcompat.coordinator.queue_of(self).raw.put, closure)  # raises its error
            except Exception as e:
                self.error_reached_user(e)
                raise
            return remote_value
        self.dispatcher.last_accumulators = entry.accumulators
        if self.config.switches_modes:  # the mode is read after a wait for room: a switch
            try:  # reaches the next task within a round or two
                watchdog.wait_bounded(
                    self, lambda: self.engine.wait_room(self.config.sync.max_pending, 1.0))
            except Exception as e:  # pylint: disable=broad-except
                self.error_reached_user(e)
                raise translate(e) from e
        kind, size = self.engine.task_kind, 1  # the closure is made for the mode it runs in
        if kind == "round":
            source = (entry.accumulate_fn, (self.code_tensor(NO_ROUND),) + tuple(args or ()),
                      kwargs)
        elif entry.step_fn is not None:  # one dataset batch of granules, its own update
            size = self.config.assign.step_units
            source = (entry.step_fn.of(size), tuple(args or ()), kwargs)
        else:
            source = (fn, args, kwargs)
        closure = self.dispatcher.task_closure(source)
        remote_value = closure.build_output_remote_value()
        self.losses.keep(closure, remote_value, by_round=kind == "round" and entry.loss_in_apply)
        self._wrap_fetch(remote_value)
        try:
            self.engine.submit(closure, kind, size)  # dispatch() attaches the engine's Task
        except Exception as e:  # pylint: disable=broad-except
            self.error_reached_user(e)
            raise translate(e) from e
        if kind == "round":
            self.dispatcher.task_submitted(source[0])  # the first round's apply traced ahead
        if self.config.tick_s:
            watchdog.ensure_ticker(self, self.config.tick_s)
        return remote_value

    def join(self):
        try:
            if self.failover is not None:
                self.failover.wait_ready()  # a recovery in progress: the fit goes on after it
            if self.engine is not None:
                watchdog.wait_bounded(self, lambda: self.engine.wait_idle(timeout=1.0))
                if self.failover is not None and self.failover.check():
                    # a PS died while the engine was idle: its steps, if any, run again
                    watchdog.wait_bounded(self, lambda: self.engine.wait_idle(timeout=1.0))
            else:  # ASP: TF's own wait, with the stall bound
                queue = tfcompat.coordinator.queue_of(self).raw
                while True:
                    failovers = len(self.failover.events) if self.failover else 0
                    watchdog.wait_bounded(self, lambda: queue.wait(timeout=1.0))
                    if self.failover is None or (self.failover.ready()
                                                 and len(self.failover.events) == failovers):
                        break
                    # A PS died during the wait: the steps it failed are queued again
                    self.failover.wait_ready()  # once the recovery ends; wait for them too
                if self.failover is not None:
                    self.failover.check()  # a PS that died while nothing ran
            self.losses.flush()  # the last steps' losses
            if self.engine is not None:
                self.engine.raise_if_error()
            translated(super().join)
        except Exception as e:
            self.error_reached_user(e)
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
            return translated(super().done)
        except Exception as e:
            self.error_reached_user(e)
            raise

    # ------------------------------------------------------- for the runtime
    def forget_traces(self) -> list:
        """Drops the traced functions that captured the old placement (kept alive: a
        tf.function garbage-collected during fit stalls on blocking RPCs, TF_INTERNALS.md):
        the next task traces its step again. Returns the keys (accumulator sets) of the
        apply functions dropped."""
        applies, drains = self.dispatcher.forget_functions()
        self._kept_traces.append((dict(self.tracer.entries), applies, drains))
        self.tracer.entries.clear()
        self.closures.clear()  # copies would run the old traces
        return list(applies)

    @property
    def errors_reached_user(self) -> int:
        """Errors raised to the user so far: the fit a closure made now belongs to
        (:class:`~tf_hetero.strategies.runtime.tags.ClosureTag`); a failure of a closure made
        before the last one is that error's echo. With an engine, its generation (one count
        for the queue's and the engine's stale checks)."""
        return self.engine.generation if self.engine is not None else self._async_errors

    def is_internal(self, closure) -> bool:
        """True for a closure of the engine's own that is no step of the user's (a drain):
        :class:`~tf_hetero.telemetry.TaskLog` does not count it as a task."""
        tag = tag_of(closure)
        return tag is not None and tag.internal

    def closure(self, fn, args, kwargs):
        """A TF closure of ``fn`` (traced now, under the strategy, as ``schedule`` would), or
        a copy of the last one built for ``fn`` on the same argument objects
        (:mod:`~tf_hetero.strategies.runtime.closures`)."""
        manager = tfcompat.coordinator.queue_of(self).cancellation_manager
        copied = self.closures.copy_of(fn, args, kwargs, manager)
        if copied is not None:
            return copied
        with self.strategy.scope():
            # The flag is shared by every thread: set under the lock that :meth:`trace` (run
            # from another thread after a rebalancing move) holds too.
            with patch_lock, tfcompat.coordinator.being_scheduled(self.strategy):
                closure = tfcompat.coordinator.Closure(fn, manager, args=args, kwargs=kwargs)
        self.closures.keep(fn, args, kwargs, manager, closure)
        return closure

    def current_function(self, fn):
        """ASP: the ``tf.function`` to run for the user's ``fn`` on the current placement.
        A PS failover created variables again on another task, and ``fn``'s traces keep
        ops placed on the dead one (measured: tf_keras's train function, its optimizer's
        update ops colocated with the variable they write), so after one a trace-free copy
        of ``fn`` (:func:`~tf_hetero.tfcompat.ops.untraced_copy`) runs instead, made again
        after each failover (``placement_generation``)."""
        generation = self.strategy.placement_generation
        if not generation or not hasattr(fn, "python_function"):
            return fn
        made = self._current.get(id(fn))
        if made is None or made[1] != generation:
            if made is not None:
                self._kept_traces.append(made[2])  # kept alive (TF_INTERNALS.md)
            made = (fn, generation, tfcompat.ops.untraced_copy(fn))
            self._current[id(fn)] = made
        return made[2]

    def trace(self, fn, args):
        """Traces the ``tf.function`` ``fn`` for ``args`` to run on the chief (an apply), under
        the strategy as ``closure`` traces a worker's function (no "invoked without
        schedule" warning: the chief runs it on purpose). Returns the concrete function."""
        with self.strategy.scope():
            with patch_lock, tfcompat.coordinator.being_scheduled(self.strategy):
                return fn.get_concrete_function(*args)

    def code_tensor(self, code: int) -> tf.Tensor:
        """The int64 tensor of a task code (:func:`task_code`); NO_ROUND's is cached (the same
        tensor object lets a closure be copied, closures.py)."""
        t = self._code_tensors.get(code)
        if t is None:
            t = tf.constant(code, tf.int64)
            if code < 0:
                self._code_tensors[code] = t
        return t

    # --------------------------------------------------------------- internals
    def _wrap_fetch(self, remote_value) -> None:
        """``fetch()``/``get()`` of a step's result first lets its round start (a round waits
        for enough steps, which a custom loop that fetches each step never schedules), then
        waits with the stall bound instead of forever (ASP: TF's wait).

        A step that TF cancelled because the data ran out raises an ``OutOfRangeError`` that
        says so: Keras' ``fit`` catches the end of the data at ``join`` ("Your input ran out
        of data; interrupting training") and then fetches the last step's logs, which stock
        TF fails with a bare ``CancelledError`` (or, if that step met the end itself, its
        bare ``OutOfRangeError``: said the same way)."""
        ready = tfcompat.coordinator.remote_value_ready(remote_value)
        coordinator = weakref.ref(self)
        fit = self.errors_reached_user

        def wait_and_maybe_error(original):
            this = coordinator()
            if this is not None and this.engine is not None and not ready.is_set():
                this.engine.flush()
                try:
                    watchdog.wait_bounded(this, lambda: ready.wait(1.0))
                except Exception as e:
                    this.error_reached_user(e)
                    raise
            try:
                original()
            except (tf.errors.CancelledError, tf.errors.OutOfRangeError) as e:
                if this is None or this.ran_out_in != fit:
                    raise
                # A step TF cancelled, or the step that met the end of the data itself (its
                # bare "End of sequence"; under ASP the step whose logs Keras fetches last
                # can be that one: seen once in CI)
                cancelled = isinstance(e, tf.errors.CancelledError)
                raise tf.errors.OutOfRangeError(
                    None, None, errors.RAN_OUT if cancelled else errors.RAN_OUT_FIT) from e

        tfcompat.coordinator.wrap_remote_wait(
            remote_value, lambda original: functools.partial(wait_and_maybe_error, original))

    def error_reached_user(self, error: BaseException | None = None) -> None:
        """An error (``error``, if known) was raised to the user: like TF's ``join``, forget
        it (and what it left queued), so the next ``fit`` on this strategy starts clean. The
        end of the data is remembered for that fit's fetches (:meth:`_wrap_fetch`)."""
        if isinstance(error, tf.errors.OutOfRangeError):
            self.ran_out_in = self.errors_reached_user
            self.data_ran_out += 1
        # Counted before the queue's error is cleared (workers.py)
        if self.engine is not None:
            self.engine.clear_error()  # its generation moves on
        else:
            self._async_errors += 1
        tfcompat.coordinator.queue_of(self).clear_error()


def shutdown(strategy) -> None:
    """Stops the worker threads, the engine ticker and the closure queue of ``strategy``'s
    coordinator (tf-hetero's or stock TF's), so nothing of a finished run keeps running beside
    the next one. TF would stop them only when the coordinator is garbage-collected, which
    never happens while its worker threads hold it. The strategy cannot schedule again."""
    coordinator = tfcompat.coordinator.coordinator_of(strategy)
    if coordinator is None:
        return
    if isinstance(coordinator, HeteroCoordinator):
        coordinator.stopped = True
        coordinator.applier.stop()
    tfcompat.coordinator.stop_cluster(coordinator)
