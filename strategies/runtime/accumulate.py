"""PS-resident gradient accumulators and the trace-time switch that fills them.

How a synchronous round works (TF glue; the round logic itself is in :mod:`tf_hetero.engine`;
the life of a step is drawn in docs/ARCHITECTURE.md):

1. While the round engine traces a training task,
   :func:`~tf_hetero.strategies.runtime.intercept.accumulating` replaces
   ``apply_gradients`` of every tf_keras optimizer class (new and legacy) with one that adds
   the task's gradients to :class:`Accumulators` instead of updating the variables. Nothing
   else the optimizer does runs in a task: no learning-rate step, no clipping, no weight decay,
   no EMA, no ``iterations`` increment. Those happen once per round, in step 3.
2. Accumulators live on the PS task of their variable (colocated), one *lane* per worker and
   two *slots* (a book's rounds alternate them): ``acc[slot, lane]``. A task of round ``r``
   (slot ``s``) running on worker ``w`` writes only ``acc[s, w]``; the first of its tasks in
   round ``r`` overwrites the lane (its tag says it held an older round), later ones add.
   Only worker ``w`` writes lane ``w``, one closure at a time, so lanes need no locks (a
   closure TF re-runs on a worker outside its round's book writes the lane it was planned
   for, and replaces it: docs/ARCHITECTURE.md), and a late task of a closed round writes a
   lane the round's apply no longer reads: late gradients never leak into another round.
   (The engine never lets a worker run its book's round after next before a round
   is applied.)
3. The round's apply (:mod:`~tf_hetero.strategies.runtime.round_apply`, run on the chief) sums the
   lanes the engine includes, divides by the number of micro-batches in them and calls the
   user's real ``optimizer.apply_gradients`` once: numerically one large-batch step. It can
   also fold in, with a weight, a late gradient of an earlier round still held in its lane
   (EPSP slack sync).

Lanes beyond the workers' take the copies made by task transfer (EPSP), so a losing copy
never mixes with its worker's other gradients. A task learns its round and lane from its
*task code* argument (:mod:`~tf_hetero.strategies.runtime.taskcode`). Accumulator memory is ``2 x lanes`` copies of the
trainable variables on the PS tasks.

Sparse gradients (``IndexedSlices``, e.g. ``keras.layers.Embedding``; docs/SPARSE.md):

- A task sums its slices per row on the worker (:func:`unique_rows`) and writes only those
  rows into its lane (``gather_nd``/``scatter_nd_update`` at ``[slot, lane, row]`` on the PS):
  only the rows' values and their int64 indices cross the network.
- Overwrite-vs-add is kept *per row*. Each lane (and slot) has a *generation*
  (``gens[lane, slot]``, int64), which a fresh write (the lane's tag held another round)
  advances by one; a sparse-mode variable has row tags ``rows[slot, lane, row]`` (int64, the
  generation that last wrote the row; ``-1`` never). A write overwrites a row whose tag is
  not the lane's current generation and adds to one that is, then sets the rows' tags; the
  lane's round tag and count are kept as for dense variables. Rows an older generation left
  in the lane are never zeroed: the apply ignores any row whose tag is not its lane's
  generation. So a lane holds exactly what a dense lane would: the writes since its round's
  first one (a generation, not the round id, so this holds however writes of different
  rounds interleave on a lane). Why this scheme: zeroing the lane on a fresh round costs the
  full dense size; zeroing only the rows the older round wrote needs a per-lane list of them
  (a variable-length PS buffer, or a bounded one that can overflow) and a zeroing scatter
  before each round's first write; a tag per row costs ``8 x 2 x lanes x rows`` bytes of PS
  memory (for a ``[rows, d]`` float32 table, ``2 / d`` of its accumulator), one extra
  gather and scatter of ``k`` int64 per write, and no zeroing ever.
- The round's apply scans the row tags (``[2, lanes, rows]``, on the PS), gathers only the
  rows that some included lane (its tag the expected round) wrote in its current
  generation, sums them with the lanes'
  weights (fold weights included), divides by the micro-batches and passes the mean to the
  optimizer as ``IndexedSlices`` (unique, sorted rows) -- what stock large-batch training
  passes for the concatenated batch, after tf_keras deduplicates it. tf_keras' SGD (momentum
  too) and Adam (new and legacy) update sparse gradients with the same arithmetic as dense ones
  (their moments decay on every row), so both paths equal one large-batch step (tested to
  1e-5, ``tests/strategies/test_sparse.py``).
- A variable's mode is fixed by its first traced write: sparse if that gradient was
  ``IndexedSlices``. A later dense gradient of a sparse-mode variable writes every row with
  row tags; a later ``IndexedSlices`` of a dense-mode variable is densified. Once a round's
  apply is traced, undecided variables stay dense.
- Measured (10,000 x 16 float32 embedding + a 16 x 3 dense layer, batches of 32 ids, one
  micro-batch per task): 640,204 bytes per write dense, 2,508 sparse (32 rows x (64 + 8) +
  204); :meth:`Accumulators.traffic` counts it on the PS.
- Local accumulation (H-PS, :mod:`~tf_hetero.strategies.runtime.local_push`) still densifies:
  its per-worker buffers and (quantized) pushes are dense, so a push costs the full size.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.engine import OVERWRITE
from tf_hetero.strategies.runtime import round_apply
from tf_hetero.strategies.runtime.round_apply import GRADIENT_STATS, column as _column
from tf_hetero.strategies.runtime.taskcode import LANE_CODE, decode_code, decode_size

__all__ = ["Accumulators", "dense", "weigh", "unique_rows", "current_worker",
           "GRADIENT_STATS"]

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
                    self.acc.append(_made_aside(
                        tf.zeros([2, num_lanes] + v.shape.as_list(), v.dtype),
                        trainable=False, name=_clean(v.name) + "/tf_hetero_acc",
                        aggregation=tf.VariableAggregation.NONE))
            with strategy.extended.colocate_vars_with(self.variables[0]):
                self.tags = _made_aside(tf.fill([num_lanes, 2], tf.constant(-1, tf.int64)),
                                        trainable=False, name="tf_hetero_acc_tags")
                self.counts = _made_aside(tf.zeros([num_lanes, 2], tf.int64),
                                          trainable=False, name="tf_hetero_acc_counts")
                # Sparse mode: a lane's generation, + 1 on each fresh (overwriting) write;
                # a row counts in the lane if its row tag equals it.
                self.gens = _made_aside(tf.zeros([num_lanes, 2], tf.int64), trainable=False,
                                        name="tf_hetero_acc_gens")
                # The lane's summed training loss (loss x micro-batches; NaN: a write that
                # brought none), beside its count: the round's mean loss.
                self.losses = _made_aside(tf.zeros([num_lanes, 2], tf.float64),
                                          trainable=False, name="tf_hetero_acc_losses")
                # [writes, bytes]: what the writes brought to the PS (see `traffic`).
                self.received = _made_aside(tf.zeros([2], tf.int64), trainable=False,
                                            name="tf_hetero_acc_received")
        #: Dense figure: every variable's full size (a sparse write moves less, `traffic`).
        self.bytes_per_push = sum(v.shape.num_elements() * v.dtype.size for v in self.variables)
        # Sparse mode (IndexedSlices): row tags [2 slots, lanes, rows] per variable (the lane
        # generation that last wrote the row), made on the first write that needs them;
        # `_mode[i]` is fixed by variable i's first write.
        self.rows: list = [None] * len(self.variables)
        self._mode: dict = {}
        self._frozen = False

    def covers(self, variables) -> bool:
        return all(v.ref() in self._index for v in variables)

    def index_of(self, variable) -> int:
        """Position of ``variable`` among the accumulated variables."""
        return self._index[variable.ref()]

    def traffic(self) -> tuple[int, int]:
        """``(writes, bytes)``: the lane writes so far and the gradient bytes they brought to
        the PS tasks (a dense variable: its full size; a sparse one: the rows written, values
        and int64 row indices; a push's codec payload when the pusher says so). Counted on
        the PS from the shapes of the tensors each write received."""
        writes, received = (int(x) for x in self.received.read_value().numpy())
        return writes, received

    def is_sparse(self, variable) -> bool:
        """Whether ``variable``'s gradient accumulates as rows (it came as IndexedSlices)."""
        return self._mode.get(self.index_of(variable)) == "sparse"

    def _sparse(self, i: int) -> bool:
        """Variable ``i`` accumulates as rows; decided by its first write (see module notes)."""
        if i not in self._mode:
            self._mode[i] = "dense" if self._frozen else "sparse"
        if self._mode[i] == "sparse" and self.rows[i] is None:
            v = self.variables[i]
            with tf.init_scope():
                inside = (tf.distribute.has_strategy()
                          and tf.distribute.get_strategy() is self.strategy)
                with contextlib.nullcontext() if inside else self.strategy.scope():
                    with self.strategy.extended.colocate_vars_with(v):
                        self.rows[i] = _made_aside(
                            tf.fill([2, self.num_lanes, v.shape[0]],
                                    tf.constant(-1, tf.int64)),
                            trainable=False, name=_clean(v.name) + "/tf_hetero_acc_rows",
                            aggregation=tf.VariableAggregation.NONE)
        return self._mode[i] == "sparse"

    def accumulate(self, grads_and_vars, code: tf.Tensor, loss=None) -> tf.Operation:
        """In a task: add this micro-batch's gradients (and its mean ``loss``, if the step
        gave one) to its lane of its round's slot.

        ``code`` is a task code (:mod:`~tf_hetero.strategies.runtime.taskcode`: round and lane); a negative code marks a task whose
        round closed before it started: it writes nothing. An ``IndexedSlices`` gradient is
        summed per row on the worker and only its rows cross to the PS (sparse mode).
        """
        round_id, slot, flags, lane = decode_code(code)
        lane = tf.where(lane >= 0, lane, current_worker())
        overwrite = tf.bitwise.bitwise_and(flags, OVERWRITE) > 0
        # A task of n granules computed the mean gradient of its n granules: it weighs n.
        n = decode_size(code)
        values = {}
        for g, v in grads_and_vars:
            i = self._index[v.ref()]
            if isinstance(g, tf.IndexedSlices) and self._sparse(i):
                values[i] = lambda g=g: unique_rows(g, n)
            else:
                self._mode.setdefault(i, "dense")
                values[i] = lambda g=dense(g): weigh(g, n)
        loss_sum = (None if loss is None
                    else weigh(tf.reduce_mean(tf.cast(loss, tf.float64)), n))
        return tf.cond(code >= 0, lambda: self.write(values, round_id, slot, lane, n,
                                                      overwrite=overwrite, loss=loss_sum),
                       lambda: tf.constant(False))

    def write(self, values: dict, round_id, slot, lane, micro_batches,
              payload_bytes: int | None = None, overwrite=False, loss=None) -> tf.Tensor:
        """Adds gradients to ``lane`` of ``slot`` for ``round_id`` (the first write of a round
        overwrites what the lane held; in sparse mode, what each *row* held) and
        ``micro_batches`` to its count. ``overwrite`` (a bool tensor): this write replaces
        the lane even if it holds ``round_id`` already (a re-run of a dead worker's task).
        ``loss``: the write's summed loss (mean loss x ``micro_batches``, float64), or
        ``None`` (the lane's loss becomes unknown, NaN, for its round).

        ``values[i]`` is a callable that makes variable ``i``'s gradient: a dense tensor, or
        (sparse mode) ``IndexedSlices`` with unique indices (:func:`unique_rows`). A dense
        one is called under the accumulator's PS device, so whatever it reads from the
        worker (e.g. a quantized payload it decodes) is what crosses the network; a sparse
        one on the worker, and only its rows and indices cross. ``payload_bytes`` (a push's
        codec payload) replaces the dense bytes counted in :meth:`traffic`.
        """
        tag = tf.gather_nd(self.tags, [[lane, slot]])[0]
        fresh = tf.logical_or(tf.not_equal(tag, round_id), overwrite)
        # The lane's generation after this write: a fresh write starts a new one, so rows
        # written before it (by any round) no longer count, as a dense overwrite would.
        gen = tf.gather_nd(self.gens, [[lane, slot]])[0] + tf.cast(fresh, tf.int64)
        idx = tf.stack([slot, lane])[None]
        updates = []
        nbytes = tf.constant(0, tf.int64)
        for i, make in sorted(values.items()):
            acc = self.acc[i]
            v = self.variables[i]
            if self._mode.setdefault(i, "dense") == "dense":
                with tf.device(acc.device):  # add on the PS: the gradient crosses once
                    g = tf.cast(dense(make()), acc.dtype)
                    old = tf.gather_nd(acc, idx)[0]
                    updates.append(acc.scatter_nd_update(idx, tf.where(fresh, g, old + g)[None]))
                nbytes += v.shape.num_elements() * v.dtype.size
                continue
            g = make()  # sparse mode: on the worker (rows summed there)
            rows = self.rows[i]
            if isinstance(g, tf.IndexedSlices):
                with tf.device(acc.device):
                    at = tf.stack([tf.fill(tf.shape(g.indices), slot),
                                   tf.fill(tf.shape(g.indices), lane), g.indices], axis=1)
                    vals = tf.cast(g.values, acc.dtype)
                    row_fresh = tf.not_equal(tf.gather_nd(rows, at), gen)
                    old = tf.gather_nd(acc, at)
                    new = tf.where(_column(row_fresh, acc.shape.rank - 3), vals, old + vals)
                    updates.append(acc.scatter_nd_update(at, new))
                    updates.append(rows.scatter_nd_update(at, tf.fill(tf.shape(g.indices),
                                                                      gen)))
                row_bytes = v.shape[1:].num_elements() * v.dtype.size + 8
                nbytes += tf.size(g.indices, out_type=tf.int64) * row_bytes
            else:  # a dense gradient of a sparse-mode variable: every row, by row tags
                with tf.device(acc.device):
                    g = tf.cast(g, acc.dtype)
                    row_fresh = tf.not_equal(tf.gather_nd(rows, idx)[0], gen)
                    old = tf.gather_nd(acc, idx)[0]
                    new = tf.where(_column(row_fresh, acc.shape.rank - 3), g, old + g)
                    updates.append(acc.scatter_nd_update(idx, new[None]))
                    updates.append(rows.scatter_nd_update(
                        idx, tf.fill([1, v.shape[0]], gen)))
                nbytes += v.shape.num_elements() * v.dtype.size
        if payload_bytes is not None:
            nbytes = tf.constant(payload_bytes, tf.int64)
        with tf.control_dependencies(updates):
            with tf.device(self.tags.device):
                n = tf.cast(micro_batches, tf.int64)
                count = tf.gather_nd(self.counts, [[lane, slot]])[0]
                new_count = tf.where(fresh, n, count + n)
                c = self.counts.scatter_nd_update([[lane, slot]], new_count[None])
                added = (tf.constant(float("nan"), tf.float64) if loss is None
                         else tf.cast(loss, tf.float64))
                held = tf.gather_nd(self.losses, [[lane, slot]])[0]
                lo = self.losses.scatter_nd_update([[lane, slot]],
                                                   tf.where(fresh, added, held + added)[None])
                t = self.tags.scatter_nd_update([[lane, slot]], round_id[None])
                e = self.gens.scatter_nd_update([[lane, slot]], gen[None])
                r = self.received.assign_add(tf.stack([tf.constant(1, tf.int64),
                                                       tf.cast(nbytes, tf.int64)]))
        with tf.control_dependencies([c, t, e, r, lo]):
            return tf.constant(True)

    def make_apply_fn(self, optimizer, scales_velocity: bool):
        """The round's apply of these lanes with ``optimizer``
        (:func:`~tf_hetero.strategies.runtime.round_apply.make_apply_fn`)."""
        # A variable no write has decided yet stays dense from now on: the apply is traced.
        self._frozen = True
        sparse = [self._mode.get(i) == "sparse" for i in range(len(self.acc))]
        return round_apply.make_apply_fn(self, optimizer, sparse, scales_velocity)

def unique_rows(g: tf.IndexedSlices, n) -> tf.IndexedSlices:
    """``g`` (IndexedSlices, rows may repeat) with each row summed once (int64 indices, in
    order of first appearance) and weighed by the int64 task size ``n``; runs where it is
    called (on the worker in a task, so only unique rows cross to the PS)."""
    indices, position = tf.unique(tf.cast(g.indices, tf.int64), out_idx=tf.int64)
    values = tf.math.unsorted_segment_sum(g.values, position,
                                          tf.shape(indices, out_type=tf.int64)[0])
    return tf.IndexedSlices(weigh(values, n), indices, g.dense_shape)


def _made_aside(initial_value, **kwargs) -> tf.Variable:
    """A ``tf.Variable`` (made under ``tf.init_scope``, often while a task is traced) that
    the trace does not count as its own: a ``tf.function`` whose first trace creates
    variables is traced a second time before it can run (docs/TF_INTERNALS.md, "Where a
    fit's first second goes"), and a step's first trace is where its accumulators are
    found and made. Lifting out of the graph is what ``tf.init_scope`` already does here."""
    return tf.Variable(initial_value, experimental_enable_variable_lifting=False, **kwargs)


def _clean(name: str) -> str:
    return name.split(":")[0].replace("/", "_")
