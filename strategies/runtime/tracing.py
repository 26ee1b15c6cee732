"""Step inspection: how the coordinator runs each function it is asked to schedule.

Each scheduled function is traced once more by tf-hetero (never run) with ``apply_gradients``
intercepted (:func:`~tf_hetero.strategies.runtime.intercept.accumulating`): a function that
calls a tf_keras optimizer's ``apply_gradients`` is a training step and goes to the engine;
anything else (evaluation, user functions) runs as stock TF would. In rounds mode the step is
re-traced as an *accumulating* variant that takes a task code (round, slot, lane, push flags)
as its first argument and writes its gradient into PS accumulators (or, with local
accumulation, into per-worker buffers) instead of updating the variables.
"""

from __future__ import annotations

import time

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.engine import EngineError
from tf_hetero.strategies.runtime.accumulate import Accumulators
from tf_hetero.strategies.runtime.intercept import accumulating
from tf_hetero.strategies.runtime.taskcode import NO_ROUND, decode_size
from tf_hetero.strategies.runtime.granules import GranuleIterator, is_iterator
from tf_hetero.strategies.runtime.local_push import LocalBuffers

__all__ = ["StepEntry", "StepTracer", "concrete_writes"]


class StepEntry:
    """How the coordinator runs one scheduled function."""

    def __init__(self, accumulate_fn=None, is_train: bool = False, keep=None, accumulators=(),
                 step_fn=None, loss_in_apply: bool = False):
        self.accumulate_fn = accumulate_fn
        #: Each task's loss reaches its round's apply (pushed to the PS beside its gradients),
        #: which reports the round's mean loss: the loss check reads that instead of copying
        #: every task's result to the chief (runtime/divergence.py).
        self.loss_in_apply = loss_in_apply
        #: A strategy whose mode switches (AutoStrategy), with sized rounds: the step as the
        #: user wrote it (its own update) reading ``size`` granules as one batch, i.e. one
        #: dataset batch as stock PSS's step does (``step_fn.of(size)(*args)``).
        self.step_fn = step_fn
        self.is_train = is_train
        # The accumulators the step writes: a round applies only these (another model's
        # optimizer on this strategy must not run, even with zero gradients).
        self.accumulators = tuple(accumulators)
        # Functions traced only to inspect a step stay referenced here: garbage-collected in
        # the middle of fit, TF removes them from every server with blocking RPCs (seen:
        # seconds of stall).
        self.keep = keep
        self.trace_s: float | None = None  # seconds the trace took (set by StepTracer)


class _StepsBySize:
    """The user's step reading ``size`` granules as one batch, one ``tf.function`` per size
    (a Python int when traced: the reads unrolled, the batch's shape static; the same
    function object for the same size, so its closures are copied, closures.py)."""

    def __init__(self, python_fn):
        self._python_fn, self._by_size = python_fn, {}

    def of(self, size: int):
        fn = self._by_size.get(size)
        if fn is None:
            python_fn = self._python_fn

            @tf.function
            def step_fn(*a, **kw):  # traced when the first asynchronous step is made
                a = tuple(GranuleIterator(x, size) if is_iterator(x) else x for x in a)
                return python_fn(*a, **kw)

            fn = self._by_size[size] = step_fn
        return fn


class StepTracer:
    """Traces scheduled functions and owns what the traces create: the PS accumulators and
    per-worker buffers, and which task function writes which accumulators."""

    def __init__(self, coordinator):
        self.coordinator = coordinator
        self.strategy = coordinator.strategy
        self.config = coordinator.config
        self.engine = coordinator.engine
        self.monitor = coordinator.monitor
        self.entries: dict = {}
        self.accumulators: list[Accumulators] = []
        self.buffers: list[LocalBuffers] = []  # local accumulation (H-PS)
        self.accumulators_of: dict = {}  # task function -> the accumulators it writes
        self.optimizers: list = []  # asynchronous steps' optimizers (the divergence message)

    def entry(self, fn, args, kwargs) -> StepEntry:
        entry = self.entries.get(fn)
        if entry is not None:
            return entry
        t0 = time.monotonic()
        if self.engine is None or not (self.engine.rounds_mode or self.config.switches_modes):
            entry = self._probe_entry(fn, args, kwargs)
        else:
            entry = self._accumulating_entry(fn, args, kwargs)
        entry.trace_s = time.monotonic() - t0  # what tracing it again costs (rebalancing)
        self.entries[fn] = entry
        return entry

    def _probe_entry(self, fn, args, kwargs) -> StepEntry:
        """Async strategies run the step as written; a trace tells whether it trains."""
        python_fn = _autograph(fn)
        if python_fn is None:
            self._refuse_direct_writes(fn, concrete_writes(fn))
            return StepEntry(None, is_train=False)
        def note_optimizer(optimizer, variables):
            if not any(o is optimizer for o in self.optimizers):
                self.optimizers.append(optimizer)
            return _NullAccumulators()

        record, keep = self._trace_once(python_fn, args, kwargs, note_optimizer)
        self._refuse_direct_writes(fn, record.get("writes", ()))
        self._build_optimizers(record)  # before the step's own trace: traced once
        if record.get("calls", 0):
            self.monitor.bytes_per_push = record["bytes"]
        return StepEntry(None, is_train=record.get("calls", 0) > 0, keep=keep)

    def _accumulating_entry(self, fn, args, kwargs) -> StepEntry:
        python_fn = _autograph(fn)
        if python_fn is None:  # a concrete function: cannot re-trace it
            self._refuse_direct_writes(fn, concrete_writes(fn))
            return StepEntry(None, is_train=False)
        record = {}
        local = self.config.local is not None
        find = self._accumulators_for
        if local:
            self._make_buffers(python_fn, args, kwargs)
            find = self._buffers_for
        written = []

        def accumulators_for(optimizer, variables):
            found = find(optimizer, variables)
            written.append(found.acc if local else found)
            return found

        sized = self.config.granule is not None

        @tf.function
        def accumulate_fn(code, *a, **kw):
            if sized:  # the task reads its size's worth of granules as one batch
                size = decode_size(code)
                a = tuple(GranuleIterator(x, size) if is_iterator(x) else x for x in a)
            with accumulating(accumulators_for, code) as rec:
                out = python_fn(*a, **kw)
            record.update(rec)
            return out

        keep = self.coordinator.closure(accumulate_fn, (self.coordinator.code_tensor(NO_ROUND),)
                                        + tuple(args), kwargs)
        self._refuse_direct_writes(fn, record.get("writes", ()))
        self._build_optimizers(record)  # on every variable passed, before the apply's trace
        accs = tuple(dict.fromkeys(written))
        self.accumulators_of[accumulate_fn] = accs
        step_fn = None
        if sized and self.config.switches_modes:
            step_fn = _StepsBySize(python_fn)

        is_train = record.get("calls", 0) > 0
        return StepEntry(accumulate_fn, is_train=is_train, keep=keep, accumulators=accs,
                         step_fn=step_fn,
                         # local buffers push no loss (local_push.py)
                         loss_in_apply=is_train and not local and not record.get("lossless", True))

    def _build_optimizers(self, record) -> None:
        """Builds the tf_keras optimizers a step's trace saw, as their own first
        ``apply_gradients`` would: in call order, on every variable each call was passed
        (those without a gradient included). Made here, their slots are made by no trace:
        a ``tf.function`` whose first trace creates variables is traced twice
        (TF_INTERNALS.md, "Where a fit's first second goes"), and the round's apply, whose
        own build sees only the variables with a gradient, finds the optimizer built as a
        stock step would have built it."""
        with self.strategy.scope():
            for optimizer, variables in record.get("applied", ()):
                tfcompat.keras.build_optimizer(optimizer, variables)

    def _refuse_direct_writes(self, fn, writes) -> None:
        """A step that updates trainable variables itself would run asynchronously, as under
        stock PSS, under a strategy that promises rounds or a staleness bound: refused."""
        if not writes or self.engine is None:  # ASP: asynchronous is what it promises
            return
        who = type(self.strategy).__name__
        name = getattr(fn, "__name__", None) or getattr(fn, "name", None) or repr(fn)
        shown = ", ".join(dict.fromkeys(writes))
        raise ValueError(
            f"{who}: the scheduled function {name!r} updates trainable variables without an "
            f"optimizer's apply_gradients (tf_keras) or apply (Keras 3): {shown}. {who} cannot "
            "put such an update in its rounds (or under its staleness bound): it would be "
            "applied at once, asynchronously, as under stock ParameterServerStrategy. Fix: "
            "compute the gradients (tf.GradientTape) and call the optimizer's apply_gradients "
            "(or minimize; Keras 3: apply) in the step, from a tf.function the strategy can "
            "trace (not a concrete function); or train this step under tf.distribute."
            "ParameterServerStrategy or tf_hetero.ASPStrategy.")

    def describe_learning_rates(self) -> str:
        """``"learning rate 0.32"`` of the optimizers the training steps use (for the
        divergence message); a schedule is named by its class."""
        rates = []
        optimizers = [getattr(acc, "optimizer", None) for acc in self.accumulators]
        for optimizer in optimizers + self.optimizers:
            lr = getattr(optimizer, "learning_rate", None)
            if lr is None:
                continue
            try:
                rates.append(f"{float(lr):g}")
            except (TypeError, ValueError):
                rates.append(type(lr).__name__)
        return f"learning rate {', '.join(dict.fromkeys(rates))}" if rates else ""

    def _make_buffers(self, python_fn, args, kwargs) -> None:
        """Local accumulation: a first trace finds the step's optimizers and variables, so
        that their per-worker buffers exist before the real trace (they cannot be created
        while a step is traced)."""
        found, in_loop = [], []

        def record(optimizer, variables):
            # Noted here, raised after the trace: raised inside it, AutoGraph would wrap the
            # one-line refusal in a screen of "in user code" frames.
            in_loop.append("while" in tf.compat.v1.get_default_graph().name)
            found.append((optimizer, list(variables)))
            return _NullAccumulators()

        _, self._probe_keep = self._trace_once(python_fn, args, kwargs, record)
        if any(in_loop):
            raise ValueError(
                f"{type(self.strategy).__name__}: the training step runs several micro-batches "
                "per task (compile(steps_per_execution > 1)), which local accumulation (one "
                "buffered push per worker per round) does not support. Fix: compile with "
                "steps_per_execution=1 (the strategy sizes each worker's share of a round "
                "itself).")
        for optimizer, variables in found:
            acc = self._accumulators_for(optimizer, variables)
            if not any(b.acc is acc for b in self.buffers):
                self.buffers.append(LocalBuffers(self.strategy, acc, self.config.codec,
                                                 self.strategy.push_hook))
        self.monitor.bytes_per_push = sum(b.bytes_per_push for b in self.buffers)
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

        return record, self.coordinator.closure(traced, args, kwargs)  # traces only

    def _buffers_for(self, optimizer, variables) -> LocalBuffers:
        """Local accumulation: the step adds into its worker's buffers."""
        for buffers in self.buffers:
            if buffers.acc.optimizer is optimizer and buffers.covers(variables):
                return buffers
        raise EngineError("a training step used variables that the first trace did not "
                          "see; local accumulation cannot buffer them.")

    def _accumulators_for(self, optimizer, variables) -> Accumulators:
        for acc in self.accumulators:
            if acc.optimizer is optimizer and acc.covers(variables):
                return acc
        with tf.init_scope():
            acc = Accumulators(self.strategy, variables, self.engine.num_workers,
                               self.engine.num_lanes)
        acc.optimizer = optimizer
        self.accumulators.append(acc)
        if self.config.local is None:
            self.monitor.bytes_per_push = sum(a.bytes_per_push for a in self.accumulators)
        return acc


#: Ops that write a resource variable (the optimizer's ResourceApply* included).
_WRITE_OPS = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")
_WRITE_OP_PREFIXES = ("ResourceApply", "ResourceSparseApply", "ResourceScatter")


def concrete_writes(fn) -> list[str]:
    """The trainable variables a concrete function (which tf-hetero cannot re-trace) writes
    in its own graph: each write op's variable is found through the graph's captures.
    Writes inside nested functions (loops, conditionals) are not seen."""
    graph = getattr(fn, "graph", None)
    if graph is None:
        return []
    trainable = {id(v.handle): v.name for v in getattr(graph, "trainable_variables", ())
                 if v.dtype.is_floating}
    internal_to_variable = {id(internal): trainable[id(external)]
                            for external, internal in graph.captures if id(external) in trainable}
    writes = []
    for op in graph.get_operations():
        if op.type in _WRITE_OPS or op.type.startswith(_WRITE_OP_PREFIXES):
            handle = op.inputs[0]
            while handle.op.type == "Identity":
                handle = handle.op.inputs[0]
            if id(handle) in internal_to_variable:
                writes.append(f"{internal_to_variable[id(handle)]} ({op.type})")
    return writes


def _autograph(fn):
    """The Python function behind a tf.function, converted by AutoGraph as tf.function would.

    Keras' multi-step train function loops with ``for _ in tf.range(steps_per_execution)``,
    which needs AutoGraph; calling ``fn.python_function`` from our own tf.function does not
    convert it (measured: "Iterating over a symbolic tf.Tensor is not allowed").
    """
    python_fn = getattr(fn, "python_function", None)
    if python_fn is None:
        return None
    return tf.autograph.to_graph(python_fn) if tfcompat.ops.autograph_enabled(fn) else python_fn


class _NullAccumulators:
    def accumulate(self, grads_and_vars, code, loss=None):
        return tf.no_op()
