"""The engine's :class:`~tf_hetero.engine.api.Dispatcher` on TensorFlow: puts task closures
on the coordinator's closure queue (pinned to a worker through TF's per-worker tagged queues,
or on the shared queue), and builds each round's apply and hands it to the chief's applier
(:mod:`~tf_hetero.strategies.runtime.applier`).

TF counts tagged (pinned) closures nowhere (docs/TF_INTERNALS.md): :meth:`put` counts them in
flight itself, so ``join()`` waits for them and ``mark_finished()`` balances.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.engine import EngineError
from tf_hetero.strategies.runtime.taskcode import NO_ROUND
from tf_hetero.strategies.runtime.errors import translate
from tf_hetero.strategies.runtime.tags import ClosureKind, ClosureTag, set_tag, tag_of

__all__ = ["ClosureDispatcher", "hand_on"]


class ClosureDispatcher:
    """Implements :class:`tf_hetero.engine.api.Dispatcher` for one coordinator."""

    def __init__(self, coordinator, tracer):
        self.coordinator = coordinator
        self.tracer = tracer
        self.engine = coordinator.engine
        self.queue = tfcompat.coordinator.queue_of(coordinator)
        self.last_accumulators: tuple = ()  # of the last training step scheduled
        self._drain_fns: dict = {}  # accumulators -> their push-only function (pipelined H-PS)
        self._apply_fns: dict = {}  # accumulators -> their round apply function
        # Held while an apply function is looked up or traced: a rebalancing move has one
        # traced ahead, on another thread (prepare_applies), while rounds may close.
        self._apply_lock = threading.Lock()
        #: Each apply function traced: ``("at close", seconds)`` when a round's close traced
        #: it (that round's apply waited for it), ``("ahead", seconds)`` when
        #: :meth:`prepare_applies` did (:meth:`task_submitted`, or a rebalancing move).
        self.apply_traces: list[tuple[str, float]] = []
        #: Each apply function traced: how many times its optimizer updates were traced
        #: (one per accumulator set when their optimizers were built before, as the step's
        #: entry builds a tf_keras optimizer, tracing.py; two when an optimizer created
        #: its variables inside the trace).
        self.update_traces: list[int] = []
        # A step function -> its round tasks submitted, until its apply is traced ahead (-1).
        self._ahead: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # -------------------------------------------------------------- Dispatcher
    def dispatch(self, task, worker, round_id):
        closure = task.payload
        # Tagged here, before the put: a worker thread may pick the closure up at once (even
        # before engine.submit() has returned to schedule()).
        tag_of(closure).task = task
        self.put(closure, worker)  # its task code is set when it starts (workers.py)

    def drain(self, worker):
        """A push-only closure: pushes ``worker``'s buffered gradients (pipelined H-PS), of
        the accumulators the last training step wrote."""
        accs = self.last_accumulators
        fn = self._drain_fns.get(accs)
        if fn is None:
            buffers = [b for b in self.tracer.buffers if b.acc in accs]
            strategy = self.coordinator.strategy

            @tf.function(autograph=False)
            def fn(code):
                return strategy.run(lambda: tf.reduce_any(tf.stack([b.drain(code) for b in buffers])))

            self._drain_fns[accs] = fn
            self.tracer.accumulators_of[fn] = accs
        return self.task_closure((fn, (self.coordinator.code_tensor(NO_ROUND),), None))

    def duplicate(self, task):
        """A second closure of ``task``'s step (task transfer); it reads its own worker's data."""
        return self.task_closure(tag_of(task.payload).source)

    def dispatch_apply(self, round_id, lanes, folds):
        try:
            self._dispatch_apply(round_id, lanes, folds)
        except Exception as e:  # pylint: disable=broad-except
            self.engine.fail(translate(e))  # e.g. the queue already holds a PS error

    def cancel(self, task):
        closure = task.payload
        if closure.maybe_call_with_output_remote_value(
                lambda r: tfcompat.coordinator.remote_value_ready(r).is_set()):
            return  # an absorbed step already ended with its round's result
        closure.mark_cancelled()

    def absorb(self, task, like):
        """``task``'s step ends with ``like``'s result (:func:`hand_on`, on the worker
        thread that ran ``like``); it runs nowhere, so its loss is not waited for."""
        tag_of(like.payload).echoes.append(task.payload)
        self.coordinator.losses.forget(task.payload)

    # ---------------------------------------------------------------- helpers
    def task_closure(self, source):
        """A closure of ``source`` = ``(fn, args, kwargs)``, tagged as an engine task."""
        closure = self.coordinator.closure(*source)
        set_tag(closure, ClosureTag(ClosureKind.TASK, source=source,
                                    fit=self.coordinator.errors_reached_user))
        return closure

    def put(self, closure, worker):
        """Queues ``closure`` for ``worker`` (``None``: the shared queue, any worker)."""
        queue = self.queue
        if worker is None:
            closure.tag = None
            try:
                queue.raw.put(closure)  # raises the queue's error, if any
            except Exception as e:  # pylint: disable=broad-except
                self.engine.fail(translate(e))
            return
        queue.count_pinned(1)
        queue.raw.put(closure, tag=worker)

    def _dispatch_apply(self, round_id, lanes, folds):
        rnd = self.engine.rounds[round_id]
        slot = rnd.slot
        weights, expected = self._apply_arrays()
        for lane in lanes:
            weights[lane, slot], expected[lane, slot] = 1.0, round_id
        for (lane, fold_slot), (late_round, weight) in folds.items():
            weights[lane, fold_slot], expected[lane, fold_slot] = weight, late_round
        args = _apply_args(weights, expected, rnd.scale, rnd.max_norm, rnd.velocity)
        fn = self._round_apply_fn(self._round_accumulators(round_id, folds), args)
        if rnd.velocity != 1.0 and not fn.scales_velocity:
            raise EngineError(f"round {round_id} asks its apply to scale the optimizer's "
                              f"velocity by {rnd.velocity}, but the apply was traced for an "
                              "update scale without velocity(): set the engine's update scale "
                              "before its first round.")
        # Run from the chief, in order (applier.py): an apply on a worker's queue waited
        # behind that worker's task and held the worker up.
        self.coordinator.applier.submit(round_id, fn, args)

    def _round_accumulators(self, round_id, folds) -> tuple:
        """The accumulators written by the tasks of ``round_id`` and of the rounds whose late
        gradients it folds in (in creation order)."""
        rounds = {round_id} | {late for late, _ in folds.values()}
        written = set()
        for r in rounds:
            rnd = self.engine.rounds[r]
            for task in rnd.tasks + rnd.copies:
                written.update(self.tracer.accumulators_of.get(tag_of(task.payload).source[0],
                                                                ()))
        return self._in_creation_order(written)

    def _in_creation_order(self, written) -> tuple:
        """The accumulators in ``written``, in creation order: the key of their apply."""
        return tuple(a for a in self.tracer.accumulators if a in written)

    def _round_apply_fn(self, accumulators: tuple, args: tuple):
        """The apply function of ``accumulators`` (one per set of accumulators a round
        wrote), traced on first use for the chief, where :mod:`applier` runs it."""
        with self._apply_lock:
            fn = self._apply_fns.get(accumulators)
            if fn is None:
                fn = self._trace_apply(accumulators, args, "at close")
        return fn

    def _trace_apply(self, accumulators: tuple, args: tuple, when: str):
        """Traces the apply of ``accumulators`` (caller holds ``_apply_lock``)."""
        t0 = time.monotonic()
        # Only an engine that asks for a velocity (AutoStrategy's back-off) gets the
        # velocity's multiply: one op per momentum slot on its PS each round, for nothing
        # elsewhere.
        scales_velocity = self.engine.asks_velocity
        fns = [a.make_apply_fn(a.optimizer, scales_velocity) for a in accumulators]

        @tf.function(autograph=False)
        def fn(weights, expected, scale, max_norm, velocity):
            # Each: [micro-batches, gradient norm, units, lanes, mean_sq, lane_sq, loss,
            # skipped] (round_apply.GRADIENT_STATS). The accumulators share the round's
            # lanes, so counts come from the first; squared norms add up over the
            # variables; the loss is the first set's (the one its step's `minimize` was
            # given); a LossScaleOptimizer's skip is a skip of the round.
            out = [f(weights, expected, scale, max_norm, velocity) for f in fns]
            norm = tf.sqrt(tf.add_n([o[1] ** 2 for o in out]))
            return tf.stack([out[0][0], norm, out[0][2], out[0][3],
                             tf.add_n([o[4] for o in out]), tf.add_n([o[5] for o in out]),
                             out[0][6], tf.reduce_max(tf.stack([o[7] for o in out]))])

        # Called flat (FlatCaller): one signature, and the binding of ``tf.function``'s call
        # (~0.5 ms of the chief's Python) would sit on the round's critical path each apply.
        # The tf.function stays referenced with it (forget_functions).
        call = tfcompat.coordinator.FlatCaller(self.coordinator.trace(fn, args))
        call.function, call.scales_velocity = fn, scales_velocity
        self._apply_fns[accumulators] = call
        self.apply_traces.append((when, time.monotonic() - t0))
        self.update_traces.append(sum(f.experimental_get_tracing_count() for f in fns))
        return call

    def _apply_arrays(self):
        """An apply's ``weights`` (all 0: nothing counts) and ``expected`` (-2: no tag), one
        row per accumulator lane, one column per slot; a round sets its lanes' entries."""
        lanes = self.engine.num_lanes
        return np.zeros((lanes, 2), np.float32), np.full((lanes, 2), -2, np.int64)

    def task_submitted(self, fn) -> None:
        """After each round task of the step ``fn`` is submitted: once a round's worth of
        them is queued (one per worker), traces the apply of the accumulators ``fn`` writes
        on a thread of its own, while that first round's tasks run. The round's close then
        finds its apply traced: the trace (~0.2 s here, docs/TF_INTERNALS.md "Where a fit's
        first second goes") sat between the first round's close and its apply, so between
        the first two rounds of every fit of a new model. A round that closes first traces
        it itself, as before (``_apply_lock``)."""
        count = self._ahead.get(fn, 0)
        if count < 0:
            return  # started already
        if count + 1 < self.engine.num_workers:
            self._ahead[fn] = count + 1
            return
        self._ahead[fn] = -1
        key = self._in_creation_order(set(self.tracer.accumulators_of.get(fn, ())))
        if key and key not in self._apply_fns:
            threading.Thread(target=self.prepare_applies, args=([key],), daemon=True,
                             name="tf-hetero-prepare-apply").start()

    def prepare_applies(self, keys) -> None:
        """Traces the apply functions of ``keys`` (tuples of accumulators) that are not traced
        yet. Run on a thread of its own while the first round of a new step
        (:meth:`task_submitted`) or on a new placement (a rebalancing move) runs: that
        round's close then finds its apply traced instead of tracing it (~0.2-0.4 s here)
        between its close and its apply. An error here is left for the round's own trace to
        raise."""
        args = _apply_args(*self._apply_arrays(), 1.0)  # a trace reads shapes, dtypes
        for key in keys:
            with self._apply_lock:
                if key in self._apply_fns:
                    continue
                try:
                    self._trace_apply(key, args, "ahead")
                except Exception:  # pylint: disable=broad-except
                    return  # the round's close traces it again and reports the error

    def forget_functions(self) -> tuple[dict, dict]:
        """Drops the traced apply and drain functions (a rebalancing move changed the
        placement they captured, so the next round traces them again); returns them,
        ``(applies, drains)`` by accumulators, for the caller to keep referenced (a
        tf.function garbage-collected during fit stalls on blocking RPCs, TF_INTERNALS.md)."""
        with self._apply_lock:
            applies, drains = dict(self._apply_fns), dict(self._drain_fns)
            self._apply_fns.clear()
            self._drain_fns.clear()
        return applies, drains


def _apply_args(weights: np.ndarray, expected: np.ndarray, scale: float,
                max_norm: float = 0.0, velocity: float = 1.0) -> tuple:
    """The arguments of a round's apply function, as tensors (one signature, one trace)."""
    return (tf.constant(weights), tf.constant(expected), tf.constant(scale, tf.float32),
            tf.constant(max_norm, tf.float32), tf.constant(velocity, tf.float32))


def hand_on(closure, copy_when: Callable[[object], bool] | None = None) -> None:
    """Ends the steps absorbed into ``closure``'s round (:meth:`ClosureDispatcher.absorb`)
    with ``closure``'s result, once a worker ran it, and the steps those were to end. The
    result is the one the loss watch holds for it (TF's closure keeps only a weak reference
    to it).

    An echo's values stay on the worker that ran ``closure``, but for one ``copy_when``
    picks (``fit``'s held result, when its last step was absorbed): that is copied to the
    chief here, on the worker's thread, as TF copies a result it runs itself; a worker lost
    before ``join`` would otherwise take ``fit``'s logs along."""
    tag = tag_of(closure)
    echoes, tag.echoes = tag.echoes, []
    if not echoes:
        return
    kept = tag.output[1] if tag.output is not None else None
    result = kept if kept is not None else closure.maybe_call_with_output_remote_value(
        lambda r: r)
    values = tfcompat.coordinator.remote_values(result)

    def end(echo_result):
        tfcompat.coordinator.set_remote_value(echo_result, values)
        if copy_when is not None and copy_when(echo_result):
            try:
                tfcompat.coordinator.copy_to_chief(echo_result)
            except Exception:  # pylint: disable=broad-except
                pass  # its worker is gone: fit's own read raises that, translated

    while echoes:  # an echo's own echoes too: it will not run to hand them on (it was
        echo = echoes.pop()  # absorbed, or made again by a failover and then absorbed)
        echo.maybe_call_with_output_remote_value(end)
        inner = tag_of(echo)
        if inner is not None and inner.echoes:
            echoes.extend(inner.echoes)
            inner.echoes = []
