"""Moves a PS variable, with its optimizer slots and its accumulators, to another PS task.

How a variable moves (evidence: docs/PSLD.md section 4):

- Under ``ParameterServerStrategy`` every PS variable is a ``ps_values.CachingVariable``
  wrapping the real ``ResourceVariable`` (with GPU workers an ``AggregatingVariable`` around
  that). Layers, the optimizer's slot lists, tf-hetero's accumulators, checkpoints' object
  graph all hold the *wrapper*. A move creates a copy of the inner variable on the target PS
  (constructed directly, under ``tf.device``: the strategy's creator would ignore the
  device) and swaps it into the wrapper; the wrapper object stays, so nothing that refers to
  it needs rebinding. The wrapper keeps the old inner variable's id, by which tf_keras
  optimizers key their slots (:func:`tf_hetero.tfcompat.variables.swap_inner`).
- A move happens only when the engine is idle (the rebalancer waits for a round boundary):
  nothing is in flight, the copy reads the final value, no update is lost or doubled.
- The old inner variable stays on its PS (pooled): moving back (an undo) re-uses it.

Functions traced on the old placement must be traced again (:mod:`rebalance`,
:mod:`remake`).
"""

from __future__ import annotations

import time

from tf_hetero.policies.placement import ps_index
from tf_hetero.tfcompat import variables as tfvars

# TensorFlow is imported where a variable is touched: the rebalancer's boundary logic runs
# (and is tested, tests/policies/test_rebalance.py) on the pure engine.

__all__ = ["Mover", "move_variable", "related_variables", "movable_units", "ps_device"]


def ps_device(ps: int) -> str:
    """The device of PS task ``ps``."""
    return f"/job:ps/replica:0/task:{ps}/device:CPU:0"


def related_variables(variable, optimizers, accumulators) -> list:
    """``variable``, its slots in ``optimizers`` (tf_keras new and legacy) and its
    accumulator (and sparse row tags) in ``accumulators``: everything colocated with it."""
    out = [variable]
    for opt in optimizers:
        out.extend(tfvars.optimizer_slots(opt, variable))
    for acc in accumulators:
        if acc.covers([variable]):
            i = acc.index_of(variable)
            out.append(acc.acc[i])
            if acc.rows[i] is not None:
                out.append(acc.rows[i])
    seen, unique = set(), []
    for v in out:
        if id(v) not in seen:
            seen.add(id(v))
            unique.append(v)
    return unique


def move_variable(wrapper, dst: int, pool: dict) -> None:
    """Moves the strategy variable ``wrapper`` to PS ``dst`` (value copied, wrapper kept).

    ``pool`` maps ``(id(caching variable), PS)`` to an inner variable the wrapper held there
    before (re-used by a move back)."""
    import tensorflow as tf

    w = tfvars.caching_variable(wrapper)
    old = tfvars.inner_variable(w)
    src = ps_index(old.device)
    if src == dst:
        return
    value = old.read_value()
    new = pool.get((id(w), dst))
    with tf.init_scope():
        if new is None:
            with tf.device(ps_device(dst)):
                new = tfvars.resource_variable(value, like=old)
        else:
            new.assign(value)
    pool[(id(w), src)] = old
    tfvars.swap_inner(w, new)


def movable_units(variables) -> dict:
    """name -> ``(PS, bytes x accesses per step, variable)`` of each of ``variables`` that can
    move (a ``ShardedVariable`` the optimizer sees whole is left out). Two variables of one
    name are told apart as ``name#2``, ``name#3``, ..."""
    out = {}
    for v in variables:
        if not tfvars.is_ps_variable(v):  # e.g. a ShardedVariable
            continue
        ps = ps_index(v.device)
        if ps is None:
            continue
        name = v.name
        k = 1
        while name in out and out[name][2] is not v:
            k += 1
            name = f"{v.name}#{k}"
        out[name] = (ps, 2 * v.shape.num_elements() * v.dtype.size, v)
    return out


class Mover:
    """Carries out moves for one strategy: each variable with everything colocated with it;
    the strategy's placement records follow and its ``placement_generation`` goes up (tf_keras
    makes the functions that captured the old placement again, :mod:`remake`).

    ``record(label, unit, src, dst, t0)`` is told of each move made."""

    def __init__(self, strategy, tracer, record):
        self.strategy, self.tracer, self.record = strategy, tracer, record
        self._pool: dict = {}  # (id(caching variable), PS) -> its inner variable there

    @property
    def placement(self):
        """The strategy's placement records (``strategies/runtime/placement.py``), or None."""
        return getattr(self.strategy.extended, "placement", None)

    def move_one(self, wrapper, dst: int) -> None:
        """:func:`move_variable`, and the strategy's ``placement_generation`` goes up."""
        move_variable(wrapper, dst, self._pool)
        self.strategy.placement_generation += 1

    def move(self, variable, dst: int, optimizers=()) -> None:
        """Moves ``variable`` with its slots (in ``optimizers`` and the traced steps'
        optimizers) and accumulators to PS ``dst``; the placement's records follow."""
        optimizers = list(dict.fromkeys([*optimizers,
                                         *(a.optimizer for a in self.tracer.accumulators)]))
        src = ps_index(variable.device)
        for w in related_variables(variable, optimizers, self.tracer.accumulators):
            self.move_one(w, dst)
        if self.placement is not None and src is not None:
            self.placed(variable, src, dst, 2 if variable.trainable else 1)

    def placed(self, variable, src: int, dst: int, requests: int) -> None:
        """The placement's records follow a variable moved from PS ``src`` to ``dst``
        (``requests`` per round: a trained variable is read and written, a counter read)."""
        self.placement.move(variable.name, src, dst,
                            int(variable.shape.num_elements() * variable.dtype.size), requests)

    def move_untrained(self, active) -> None:
        """Moves the small variables nobody trains off a PS leaving the set ``active``, to the
        active PS with the least load: each optimizer's step counter (``iterations``, read by
        every apply) and each accumulator's bookkeeping (``tags``, ``counts``, ``gens``,
        ``received``: created beside its first variable, they do not follow it)."""
        placement = self.placement
        accumulators = self.tracer.accumulators
        counters = [getattr(o, "iterations", None)
                    for o in dict.fromkeys(a.optimizer for a in accumulators)]
        counters += [getattr(a, k, None) for a in accumulators
                     for k in ("tags", "counts", "gens", "received")]
        for counter in counters:
            if counter is None or not tfvars.is_ps_variable(counter):
                continue
            src = ps_index(counter.device)
            if src is None or src in active:
                continue
            dst = min(active, key=lambda p: (placement.loads[p] if placement else 0, p))
            t0 = time.monotonic()
            self.move_one(counter, dst)
            if placement is not None and (counter.name, src) in {
                    (n, q) for n, q, _ in placement.placed}:  # colocated ones are not
                self.placed(counter, src, dst, 1)
            self.record("scale", counter.name, src, dst, t0)
