"""Local accumulation on the workers and one (optionally quantized) push per worker per round.

Used by :class:`tf_hetero.HPSStrategy`. Instead of writing every micro-batch's gradient to
the PS (:class:`~tf_hetero.strategies.runtime.accumulate.Accumulators`), a task adds it to a
*buffer* on its own worker (per-worker variables: they live on the worker, so this moves no
bytes), and only the tasks the engine flags push the buffer to the worker's PS lane:

- ``PUSH_ALL`` (strict mode, a worker's last task of a round): after the task's compute,
  push buffer + own gradient; the buffer empties.
- ``PUSH_OLD`` (pipelined mode, a worker's first task of a round): push the buffer as it
  stands (the previous round's gradients) *while* the task computes -- the push has no data
  dependency on the compute, so TF runs both at once -- then the buffer holds only the new
  gradient. Rounds then apply gradients one round old (staleness 1).

A push encodes ``buffer (+ gradient) + residual`` with a :mod:`tf_hetero.strategies.runtime.quantize` codec on
the worker and decodes it on the PS (the decode op is placed on the PS device, so the
payload is what crosses the network); the residual keeps what the codec lost (error
feedback). Under emulation the push waits for what the strategy's ``push_hook`` says (an
emulated link and PS tasks, :mod:`tf_hetero.emulation.push`), after the task's emulated
compute time (``hooks.step_hooks().finish_compute``); on real hardware for nothing.

Per-worker variables cannot be read inside ``tf.cond`` (docs/TF_INTERNALS.md): buffers are read
and written outside control flow with masks; only the PS writes sit in a ``tf.cond``.

Sparse gradients (``IndexedSlices``, embeddings) are densified here: the buffers are dense
per-worker copies of the variables, and a push writes the whole buffer (its accumulator
stays in dense mode, :mod:`~tf_hetero.strategies.runtime.accumulate`), so an embedding's
push costs its full size, as before. Exact (``tests/strategies/test_sparse.py``),
not sparse. A sparse push would need a per-worker touched-row mask and, with a lossy codec,
residuals of untouched rows to flush (docs/SPARSE.md).
"""

from __future__ import annotations

import tensorflow as tf

from tf_hetero import hooks
from tf_hetero.engine import PUSH_ALL, PUSH_OLD
from tf_hetero.strategies.runtime import quantize
from tf_hetero.strategies.runtime.accumulate import current_worker, dense, weigh
from tf_hetero.strategies.runtime.taskcode import decode_code, decode_size

__all__ = ["LocalBuffers"]


class LocalBuffers:
    """Per-worker buffers for the variables of one :class:`Accumulators`, and the push.

    Build it eagerly under ``strategy.scope()`` (per-worker variables cannot be created
    while a step is traced).
    """

    def __init__(self, strategy, accumulators, codec="fp32", push_hook=None):
        self.acc = accumulators
        self.optimizer = getattr(accumulators, "optimizer", None)
        self.codec = quantize.get(codec)
        self.lossy = self.codec.name != "fp32"
        variables = accumulators.variables
        # Each variable's push payload (a codec's, not the variable's size): one number per
        # variable, summed per PS when a push is traced (a move re-traces it).
        self.payload_sizes = [self.codec.payload_bytes(v.shape.num_elements()) for v in variables]
        self.bytes_per_push = sum(self.payload_sizes)
        #: What a push waits for before its PS writes (an emulated link and PS tasks, set by
        #: tf_hetero.emulate; real hardware: nothing).
        self.push_hook = push_hook or hooks.PushHook()

        def per_worker(value, name):
            return tf.Variable(value, trainable=False, name=name, per_worker_variable=True,
                               aggregation=tf.VariableAggregation.NONE)

        with strategy.scope():
            self.sums = [per_worker(tf.zeros(v.shape, v.dtype), f"tf_hetero_buf{i}")
                         for i, v in enumerate(variables)]
            self.residuals = [per_worker(tf.zeros(v.shape, tf.float32), f"tf_hetero_res{i}")
                              for i, v in enumerate(variables)] if self.lossy else []
            self.count = per_worker(tf.constant(0, tf.int64), "tf_hetero_buf_count")

    @property
    def per_worker_variables(self) -> list:
        """The buffers, residuals and count: each worker's own copy."""
        return self.sums + self.residuals + [self.count]

    def covers(self, variables) -> bool:
        return self.acc.covers(variables)

    def accumulate(self, grads_and_vars, code: tf.Tensor, loss=None) -> tf.Operation:
        """In a task: buffer this micro-batch's gradient; push if the code's flags say so.
        The step's ``loss`` is not buffered: a push gives its lane no loss (NaN)."""
        hooks.step_hooks().keep_gradient_local()  # pushes below pay the link/PS, not each step
        grads = [None] * len(self.sums)
        for g, v in grads_and_vars:
            grads[self.acc.index_of(v)] = tf.cast(dense(g), self.sums[0].dtype)
        grads = [tf.zeros_like(s) if g is None else g for g, s in zip(grads, self.sums)]
        return self._step(grads, code, drain=False)

    def drain(self, code: tf.Tensor) -> tf.Operation:
        """In a push-only task: push the buffer (no micro-batch of its own)."""
        return self._step([tf.zeros_like(s) for s in self.sums], code, drain=True)

    def _step(self, grads, code, drain: bool):
        round_id, slot, flags, _ = decode_code(code)
        size = decode_size(code)  # granules this task's gradient averages: it weighs that
        grads = [weigh(g, size) for g in grads]
        valid = code >= 0
        push_all = valid & (tf.bitwise.bitwise_and(flags, PUSH_ALL) > 0)
        push_old = valid & (tf.bitwise.bitwise_and(flags, PUSH_OLD) > 0) & ~push_all
        worker = current_worker()
        count = self.count.read_value()
        sums = [s.read_value() for s in self.sums]
        residuals = [r.read_value() for r in self.residuals]  # empty unless lossy

        # PUSH_OLD first, and independent of this task's gradient: it overlaps the compute.
        where = (round_id, slot, worker)
        pushed_old, residuals = self._maybe_push(push_old & (count > 0), sums, residuals,
                                                 where, count, None)
        # PUSH_ALL after the compute (and, under emulation, after its emulated time).
        new_count = count + (0 if drain else size)
        total = [s + g for s, g in zip(sums, grads)]
        done = None if drain else hooks.step_hooks().finish_compute(grads)
        with tf.control_dependencies([pushed_old]):  # one PS lane write at a time
            pushed_all, residuals = self._maybe_push(push_all & (new_count > 0), total,
                                                     residuals, where, new_count, done)

        # Buffers: masks, not control flow (per-worker variables cannot be read in a cond).
        keep = ~valid
        updates = []
        for s, old, g, tot in zip(self.sums, sums, grads, total):
            fresh = tf.where(push_old, g, tot)
            updates.append(s.assign(tf.where(keep, old, tf.where(push_all, tf.zeros_like(old),
                                                                   fresh))))
        # After PUSH_OLD the buffer holds this task's gradient alone, weighted by its size:
        # its count restarts at that size (not 1: the apply divides by the counts it sums).
        restart = tf.zeros_like(size) if drain else size
        updates.append(self.count.assign(tf.where(
            keep, count, tf.where(push_all, tf.constant(0, tf.int64),
                                  tf.where(push_old, restart, new_count)))))
        for r, res in zip(self.residuals, residuals):  # unchanged unless a push encoded
            updates.append(r.assign(res))
        with tf.control_dependencies(updates + [pushed_all]):
            return tf.identity(pushed_old | pushed_all)

    def _maybe_push(self, pred, values, residuals, where, micro_batches, after):
        """If ``pred``: encode ``values`` (+ residuals) and push them. Encoding happens inside
        the branch, so a task that does not push does not quantize. Returns ``(pushed,
        residuals after)`` (the residuals are unchanged when nothing was pushed)."""

        def push():
            payloads, new_residuals = self._encode(values, residuals)
            return (self._push(payloads, where, micro_batches, after),
                    *new_residuals)

        out = tf.cond(pred, push, lambda: (tf.constant(False), *residuals))
        return out[0], list(out[1:])

    def _encode(self, values, residuals):
        """Payloads of ``values`` and, with a lossy codec, the new error-feedback residuals."""
        if not self.lossy:
            return [(v,) for v in values], []
        out, res = [], []
        for v, r in zip(values, residuals):
            payload, new_r = quantize.compress(self.codec, tf.cast(v, tf.float32), r)
            out.append(payload)
            res.append(new_r)
        return out, res

    def _push(self, payloads, where, micro_batches, after):
        """The PS write of one push (inside a ``tf.cond`` branch) to ``where``: (round, slot,
        lane)."""
        round_id, slot, worker = where
        deps = [] if after is None else [after]
        sent = [p for ps in payloads for p in ps]
        deps = self.push_hook.wait(worker, self.acc.variables, self.payload_sizes, deps, sent)
        with tf.control_dependencies(deps):
            payloads = [tuple(tf.identity(p) for p in ps) for ps in payloads]
        shapes = [v.shape for v in self.acc.variables]
        values = {i: (lambda p=p, shape=shape: self.codec.decode(p, shape))
                  for i, (p, shape) in enumerate(zip(payloads, shapes))}
        return self.acc.write(values, round_id, slot, worker, micro_batches,
                              payload_bytes=self.bytes_per_push)
