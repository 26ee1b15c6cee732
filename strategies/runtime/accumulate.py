"""PS-resident gradient accumulators and the trace-time switch that fills them.

How a synchronous round works (TF glue; the round logic itself is in :mod:`tf_hetero.engine`;
the life of a step is drawn in docs/ARCHITECTURE.md):

1. While the round engine traces a training task, :func:`accumulating` replaces
   ``apply_gradients`` of every tf_keras optimizer class (new and legacy) with one that adds
   the task's gradients to :class:`Accumulators` instead of updating the variables. Nothing
   else the optimizer does runs in a task: no learning-rate step, no clipping, no weight decay,
   no EMA, no ``iterations`` increment. Those happen once per round, in step 3.
2. Accumulators live on the PS task of their variable (colocated), one *lane* per worker and
   two *slots* (a book's rounds alternate them): ``acc[slot, lane]``. A task of round ``r``
   (slot ``s``) running on worker ``w`` writes only ``acc[s, w]``; the first of its tasks in round ``r`` overwrites the
   lane (its tag says it held an older round), later ones add. Only worker ``w`` writes lane
   ``w``, one closure at a time, so lanes need no locks, and a late task of a closed round
   writes a lane the round's apply no longer reads: late gradients never leak into another
   round. (The engine never lets a worker run its book's round after next before a round
   is applied.)
3. The round's apply (:meth:`Accumulators.make_apply_fn`, scheduled like any task) sums the
   lanes the engine includes, divides by the number of micro-batches in them and calls the
   user's real ``optimizer.apply_gradients`` once: numerically one large-batch step. It can
   also fold in, with a weight, a late gradient of an earlier round still held in its lane
   (EPSP slack sync).

Lanes beyond the workers' take the copies made by task transfer (EPSP), so a losing copy
never mixes with its worker's other gradients. A task learns its round and lane from its
*task code* argument (:func:`task_code`). Accumulator memory is ``2 x lanes`` copies of the
trainable variables on the PS tasks.
"""

from __future__ import annotations

import contextlib
import threading

import tensorflow as tf

__all__ = ["Accumulators", "accumulating", "optimizer_classes", "task_code", "decode_code",
           "decode_size", "SIZE_CODE",
           "LANE_CODE", "NO_ROUND", "dense", "weigh", "current_worker", "patch_lock"]

#: A task's code packs its round, its accumulator slot, its push flags (local accumulation,
#: see :mod:`tf_hetero.strategies.runtime.local_push`), its size (granules of samples its
#: step reads, sized strategies) and, optionally, the lane it writes:
#: ``code = (((round * 2 + slot) * PUSH_CODE + push) * SIZE_CODE + size - 1) * LANE_CODE
#: + lane + 1`` (``+ 0``: the lane of the worker that runs it). A negative code writes nothing
#: (its round closed before it started).
LANE_CODE = 1024
PUSH_CODE = 4
SIZE_CODE = 4096
#: The code of a task whose round closed before it started: it writes nothing.
NO_ROUND = -1


def task_code(round_id: int, lane: int | None = None, push: int = 0,
              slot: int | None = None, size: int = 1) -> int:
    """The task code of a task of ``round_id`` (``-1``: writes nothing). ``slot`` is the
    round's accumulator slot (its book alternates them; default ``round_id % 2``).

    >>> task_code(3), task_code(3, lane=5), task_code(3, push=2), task_code(3, slot=0)
    (117440512, 117440518, 125829120, 100663296)
    >>> task_code(3, size=5) - task_code(3) == 4 * LANE_CODE
    True
    >>> task_code(-1)
    -1
    """
    if round_id < 0:
        return NO_ROUND
    if not 1 <= size <= SIZE_CODE:
        raise ValueError(f"task size {size}: need 1 to {SIZE_CODE} granules.")
    slot = round_id % 2 if slot is None else slot
    return ((((round_id * 2 + slot) * PUSH_CODE + push) * SIZE_CODE + size - 1) * LANE_CODE
            + (0 if lane is None else lane + 1))


def decode_code(code: tf.Tensor):
    """In a task: ``(round, slot, push flags, lane)`` of an int64 task code (lane -1: the
    running worker's own)."""
    round_slot = tf.math.floordiv(code, LANE_CODE * SIZE_CODE * PUSH_CODE)
    push = tf.math.floormod(tf.math.floordiv(code, LANE_CODE * SIZE_CODE), PUSH_CODE)
    return (tf.math.floordiv(round_slot, 2), tf.math.floormod(round_slot, 2), push,
            tf.math.floormod(code, LANE_CODE) - 1)


def decode_size(code: tf.Tensor) -> tf.Tensor:
    """In a task: the granules its step reads (int64; 1 for a task that writes nothing)."""
    size = tf.math.floormod(tf.math.floordiv(code, LANE_CODE), SIZE_CODE) + 1
    return tf.where(code >= 0, size, tf.constant(1, tf.int64))


_state = threading.local()
patch_lock = threading.RLock()


def optimizer_classes() -> list[type]:
    """The tf_keras optimizer classes whose ``apply_gradients`` a task may call."""
    from tf_keras.src.optimizers import optimizer as new_opt
    from tf_keras.src.optimizers.legacy import optimizer_v2

    return [new_opt.Optimizer, optimizer_v2.OptimizerV2]


@contextlib.contextmanager
def accumulating(engine_accumulators_for, code: tf.Tensor):
    """While tracing: ``optimizer.apply_gradients`` accumulates into the round's lanes.

    Args:
      engine_accumulators_for: ``fn(optimizer, variables) -> Accumulators``.
      code: the int64 task-code tensor (:func:`task_code`) of the function being traced.

    Yields a dict whose ``"calls"`` entry counts the intercepted ``apply_gradients`` calls
    (0 means the traced function is not a training step) and ``"bytes"`` the size of the
    gradients one call pushes.
    """
    record = {"calls": 0, "bytes": 0, "writes": []}

    def apply_gradients(self, grads_and_vars, name=None, **kwargs):
        grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
        if not grads_and_vars:
            return self.iterations
        record["calls"] += 1
        record["bytes"] += sum(v.shape.num_elements() * v.dtype.size for _, v in grads_and_vars)
        # Legacy optimizers create `iterations` on first use: do it outside control deps.
        iterations = self.iterations
        acc = engine_accumulators_for(self, [v for _, v in grads_and_vars])
        with tf.control_dependencies([acc.accumulate(grads_and_vars, code)]):
            return tf.identity(iterations)  # no increment: iterations counts rounds

    with patch_lock:
        classes = optimizer_classes()
        originals = {cls: cls.__dict__["apply_gradients"] for cls in classes}
        try:
            for cls in classes:
                cls.apply_gradients = apply_gradients
            with _watching_writes(record["writes"]):
                yield record
        finally:
            for cls, fn in originals.items():
                cls.apply_gradients = fn


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
    from tensorflow.python.ops import resource_variable_ops
    from tensorflow.python.training import optimizer as v1_optimizer

    # ResourceVariable overrides some writes of its base (PSS's CachingVariable delegates
    # to a ResourceVariable): patch each class that defines one.
    originals = {(cls, name): cls.__dict__[name]
                 for cls in (resource_variable_ops.BaseResourceVariable,
                             resource_variable_ops.ResourceVariable)
                 for name in _WRITE_METHODS if name in cls.__dict__}

    def watched(name, original):
        def write(self, *args, **kwargs):
            # Float only: Keras' step counters are int64 tf.Variables, trainable by default.
            if self.trainable and self.dtype.is_floating and not tf.executing_eagerly():
                writes.append(f"{self.name} ({name})")
            return original(self, *args, **kwargs)
        return write

    v1_apply = v1_optimizer.Optimizer.__dict__["apply_gradients"]

    def v1_apply_gradients(self, grads_and_vars, *args, **kwargs):
        if not tf.executing_eagerly():
            writes.append(f"{type(self).__name__}.apply_gradients (a tf.compat.v1 optimizer)")
        return v1_apply(self, grads_and_vars, *args, **kwargs)

    try:
        for (cls, name), original in originals.items():
            setattr(cls, name, watched(name, original))
        v1_optimizer.Optimizer.apply_gradients = v1_apply_gradients
        yield
    finally:
        for (cls, name), original in originals.items():
            setattr(cls, name, original)
        v1_optimizer.Optimizer.apply_gradients = v1_apply


def current_worker() -> tf.Tensor:
    """The index of the worker running the current function (int64)."""
    return tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(), tf.int64)


def weigh(g, n):
    """``g`` times the int64 task size ``n`` (a sized task's gradient counts once per granule)."""
    return g * tf.cast(n, g.dtype)


def dense(g):
    """A dense tensor of gradient ``g`` (IndexedSlices are densified)."""
    return tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g


class Accumulators:
    """Per-variable ``[2 slots, num_lanes, *shape]`` accumulators on the variable's PS task
    (lanes 0..N-1 are the workers'; more lanes take transferred copies).

    Build it under ``strategy.scope()`` or while a step is traced. ``tags[lane, slot]`` is
    the round whose gradients the lane holds in that slot, ``counts[lane, slot]`` how many
    micro-batches it summed.
    """

    def __init__(self, strategy, variables, num_workers: int, num_lanes: int | None = None):
        self.strategy = strategy
        self.variables = list(variables)
        self.num_workers = num_workers
        # Lanes 0..N-1 belong to the workers; more lanes take duplicate (transferred) tasks.
        self.num_lanes = num_lanes = num_lanes or num_workers
        if not num_workers <= num_lanes < LANE_CODE:
            raise ValueError(f"num_lanes={num_lanes}: need {num_workers} to {LANE_CODE - 1}.")
        self._index = {v.ref(): i for i, v in enumerate(self.variables)}
        self.acc = []
        # Created while a task is traced (inside the strategy, in replica context, where
        # entering scope() again is refused) or from outside the strategy.
        inside = tf.distribute.has_strategy() and tf.distribute.get_strategy() is strategy
        with contextlib.nullcontext() if inside else strategy.scope():
            for v in self.variables:
                with strategy.extended.colocate_vars_with(v):
                    self.acc.append(tf.Variable(
                        tf.zeros([2, num_lanes] + v.shape.as_list(), v.dtype),
                        trainable=False, name=_clean(v.name) + "/tf_hetero_acc",
                        aggregation=tf.VariableAggregation.NONE))
            with strategy.extended.colocate_vars_with(self.variables[0]):
                self.tags = tf.Variable(tf.fill([num_lanes, 2], tf.constant(-1, tf.int64)),
                                        trainable=False, name="tf_hetero_acc_tags")
                self.counts = tf.Variable(tf.zeros([num_lanes, 2], tf.int64),
                                          trainable=False, name="tf_hetero_acc_counts")
        self.bytes_per_push = sum(v.shape.num_elements() * v.dtype.size for v in self.variables)

    def covers(self, variables) -> bool:
        return all(v.ref() in self._index for v in variables)

    def index_of(self, variable) -> int:
        """Position of ``variable`` among the accumulated variables."""
        return self._index[variable.ref()]

    def accumulate(self, grads_and_vars, code: tf.Tensor) -> tf.Operation:
        """In a task: add this micro-batch's gradients to its lane of its round's slot.

        ``code`` is :func:`task_code` (round and lane); a negative code marks a task whose
        round closed before it started: it writes nothing.
        """
        round_id, slot, _, lane = decode_code(code)
        lane = tf.where(lane >= 0, lane, current_worker())
        # A task of n granules computed the mean gradient of its n granules: it weighs n.
        n = decode_size(code)
        values = {self._index[v.ref()]: (lambda g=dense(g): weigh(g, n)) for g, v in grads_and_vars}
        return tf.cond(code >= 0, lambda: self.write(values, round_id, slot, lane, n),
                       lambda: tf.constant(False))

    def write(self, values: dict, round_id, slot, lane, micro_batches) -> tf.Tensor:
        """Adds gradients to ``lane`` of ``slot`` for ``round_id`` (the first write of a round
        overwrites what the lane held) and ``micro_batches`` to its count.

        ``values[i]`` is a callable that makes variable ``i``'s gradient; it is called under
        the accumulator's PS device, so whatever it reads from the worker (e.g. a quantized
        payload it decodes) is what crosses the network.
        """
        tag = tf.gather_nd(self.tags, [[lane, slot]])[0]
        fresh = tf.not_equal(tag, round_id)
        idx = tf.stack([slot, lane])[None]
        updates = []
        for i, make in sorted(values.items()):
            acc = self.acc[i]
            with tf.device(acc.device):  # add on the PS: the gradient crosses once
                g = tf.cast(make(), acc.dtype)
                old = tf.gather_nd(acc, idx)[0]
                updates.append(acc.scatter_nd_update(idx, tf.where(fresh, g, old + g)[None]))
        with tf.control_dependencies(updates):
            with tf.device(self.tags.device):
                n = tf.cast(micro_batches, tf.int64)
                count = tf.gather_nd(self.counts, [[lane, slot]])[0]
                new_count = tf.where(fresh, n, count + n)
                c = self.counts.scatter_nd_update([[lane, slot]], new_count[None])
                t = self.tags.scatter_nd_update([[lane, slot]], round_id[None])
        with tf.control_dependencies([c, t]):
            return tf.constant(True)

    def make_apply_fn(self, optimizer):
        """A ``tf.function(weights, expected, scale)`` applying one update with the user's
        optimizer.

        ``weights[lane, slot]`` (float) says how much each micro-batch in that accumulator
        lane counts (1 for the closing round, less for a late gradient folded in, 0 for the
        rest); a lane counts only if its tag equals ``expected[lane, slot]``. The update is
        the weighted mean ``sum(w * acc) / sum(w * count)``, times ``scale`` (a float32 scalar:
        the round's :class:`~tf_hetero.engine.api.UpdateScale`, 1 for most). Returns ``[micro-batches it
        contains, global norm of the mean gradient]`` (float64); a gradient that is not finite
        goes in as zeros (the weights stay finite; a momentum optimizer still moves once) and
        the engine stops training (:mod:`tf_hetero.policies.diverge`).
        """
        strategy = self.strategy

        @tf.function
        def apply_fn(weights, expected, scale):
            def step():
                valid = weights * tf.cast(tf.equal(self.tags, expected), weights.dtype)
                counts = tf.cast(self.counts, weights.dtype)
                n = tf.reduce_sum(valid * counts)  # the engine applies only with work (n > 0)
                # Every tensor of gradient size stays on its variable's PS task: the mean,
                # its squared norm and the finite check are computed there and only scalars
                # reach the chief, where the apply runs (applier.py); the optimizer's updates
                # are colocated with the variables. So an apply moves no gradient over the
                # network (as a worker-side apply did: there, twice).
                grads, squares = [], []
                for acc in self.acc:
                    with tf.device(acc.device):
                        w = tf.cast(tf.transpose(valid), acc.dtype)  # [slot, lane]
                        total = tf.tensordot(w, acc, axes=[[0, 1], [0, 1]])
                        g = (total / tf.cast(tf.maximum(n, 1e-6), acc.dtype)
                             * tf.cast(scale, acc.dtype))
                        grads.append(g)
                        squares.append(tf.cast(tf.reduce_sum(tf.square(g)), tf.float64))
                norm = tf.sqrt(tf.add_n(squares))
                applied = tf.reduce_sum(tf.cast(valid > 0, counts.dtype) * counts)
                # A NaN/Inf gradient would poison the weights for good: it goes in as zeros
                # (apply_gradients cannot sit in a tf.cond: its merge_call refuses control
                # flow), and the engine stops training on the norm it reports.
                finite = tf.math.is_finite(norm)
                kept = []
                for acc, g in zip(self.acc, grads):
                    with tf.device(acc.device):
                        kept.append(tf.where(finite, g, tf.zeros_like(g)))
                grads = kept
                with tf.control_dependencies(
                        [optimizer.apply_gradients(zip(grads, self.variables))]):
                    return tf.stack([tf.cast(applied, tf.float64), norm])

            return strategy.run(step)

        return apply_fn


def _clean(name: str) -> str:
    return name.split(":")[0].replace("/", "_")
