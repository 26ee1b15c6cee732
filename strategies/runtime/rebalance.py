"""TF glue of live rebalancing: moves a variable, its optimizer slots and its accumulators
to another PS task at a round boundary of a running ``fit``
(the decisions: :class:`tf_hetero.policies.rebalance.RebalanceController`).

How a variable moves (evidence: docs/PSLD.md section 4):

- Under ``ParameterServerStrategy`` every PS variable is a ``ps_values.CachingVariable``
  wrapping the real ``ResourceVariable`` in ``_v`` (with GPU workers an
  ``AggregatingVariable`` around that). Layers, the optimizer's slot lists, tf-hetero's
  accumulators, checkpoints' object graph all hold the *wrapper*. A move creates a copy of
  the inner variable on the target PS (``ResourceVariable`` constructed directly, under
  ``tf.device``: the strategy's creator would ignore the device) and swaps ``_v``; the
  wrapper object stays, so nothing that refers to it needs rebinding.
- The wrapper keeps the old inner variable's ``_unique_id`` (set on the wrapper): tf_keras
  optimizers key their slots by it (``_index_dict``); with the new id the next trace fails
  with "The optimizer cannot recognize variable ...".
- Traced functions captured the old handle: the training step (tf-hetero's accumulating
  variant of ``train_function``, :mod:`tracing`), the round apply and H-PS drain functions
  are dropped from their caches, so the next task is traced again on the new placement. The
  old functions are kept referenced (a tf.function garbage-collected during fit stalls on
  blocking RPCs, TF_INTERNALS.md).
- Closures already queued hold the old functions, so a move happens only when the engine is
  idle: every task submitted so far finished and every round applied (``at_boundary``),
  found at a ``schedule`` call whose earlier tasks fill whole rounds. Nothing is in flight:
  the copy reads the final value, no update is lost or doubled.

The old inner variable stays on its PS (pooled): moving back (an undo) re-uses it.

Functions traced before a move (measured, ``tests/test_strategies_rebalance_inprocess.py``):
a ``tf.function`` of the user's, called on the chief or scheduled on the workers, reads the
moved variable where it is now; tf_keras's test and predict functions do not: their
concrete functions hold the old inner variable's handle among their captured inputs, and
``evaluate``, ``predict`` and ``fit``'s validation after a move read the value the
variable had when it moved. So tf_keras makes them again once the placement changed
(:func:`install`, the strategy's ``placement_generation``).

Checkpoints carry the placement (issue 14 item 6): the rebalancer tracks a small
``PythonState`` under each optimizer it serves (checkpoint key ``tf_hetero_placement``: the PS
of each of the optimizer's variables, in the optimizer's order, read when the checkpoint is
written). ``ModelCheckpoint``/``BackupAndRestore``/``save_weights`` save the optimizer, so
they save it; a restore (immediate, or deferred until the state is tracked at the next fit's
first task, as TF restores lazily created slots) records the saved placement, and the next
task, at a round boundary, moves every variable back where it was saved (``moves`` entries
with decision ``"restore"``). Values need nothing: a restore assigns through the wrapper into
whatever inner variable it holds.

Elastic PS scaling (issue 14 item 5, docs/PSLD.md section 5): TensorFlow cannot add a PS
task to a running cluster, so the PS tasks a fit may use are listed in TF_CONFIG and some
stand by. ``HeteroStrategy.scale_ps`` names the active set; the next task, at a round
boundary, moves every variable off a PS leaving the set and load onto a PS joining it
(``moves`` entries with decision ``"scale"``), the same way as a rebalancing move.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref

from tf_hetero import tfcompat
from tf_hetero.patching import wrap_once
from tf_hetero.strategies.runtime import fitplan
from tf_hetero.telemetry import psload

# TensorFlow is imported where a variable is touched: the boundary logic runs (and is
# tested, tests/test_rebalance.py) on the pure engine.

__all__ = ["Rebalancer", "install", "move_variable", "related_variables"]

#: The checkpoint key of the placement, under each optimizer.
CHECKPOINT_KEY = "tf_hetero_placement"

#: Seconds a boundary waits for the rounds in flight before giving up with an error.
BOUNDARY_TIMEOUT_S = 600.0

#: Decision 0 says the units are too coarse when the busiest PS is left above this share of
#: an even spread (the placement target of issue 14 is max/mean <= 1.05).
GAP_TO_SAY = 1.05


def install() -> None:
    """Wraps tf_keras's ``make_test_function`` and ``make_predict_function`` (once per
    process) so that a model's cached function is made again when its strategy's
    ``placement_generation`` changed since it was made: made before a move, it reads the
    moved variable's old copy (``evaluate``, ``predict``, and ``fit``'s validation, whose
    test function the first epoch made)."""
    from tf_keras.src.engine import training

    for name in ("make_test_function", "make_predict_function"):
        wrap_once(training.Model, name, _remade_after_moves)


def _remade_after_moves(original):
    def make(self, force=False):
        # predict() under PSS sets the model's strategy to None while it runs (tf_keras
        # training.py); the variables still know theirs. An unbuilt model has none (and its
        # weights raise): nothing of it can have moved.
        strategy = getattr(self, "_distribution_strategy", None)
        if strategy is None and self.built:
            strategy = next((getattr(v, "_distribute_strategy", None)
                             for v in self.weights[:1]), None)
        generation = getattr(strategy, "placement_generation", 0)
        made = self.__dict__.setdefault("_tf_hetero_generations", {})
        if made.get(original.__name__, 0) != generation:
            force = True
        function = original(self, force=force)
        made[original.__name__] = generation
        return function

    return make


def _device(ps: int) -> str:
    return f"/job:ps/replica:0/task:{ps}/device:CPU:0"


def _caching(w):
    """The ``CachingVariable`` of a strategy variable (inside an AggregatingVariable)."""
    inner = getattr(w, "_v", None)
    if inner is not None and hasattr(inner, "_v") and hasattr(inner, "_cache"):
        return inner
    if inner is not None and hasattr(w, "_cache"):
        return w
    raise TypeError(f"{getattr(w, 'name', w)!r} is not a ParameterServerStrategy variable "
                    "(no CachingVariable wrapper): it cannot be moved.")


def related_variables(variable, optimizers, accumulators) -> list:
    """``variable``, its slots in ``optimizers`` (tf_keras new and legacy) and its
    accumulator (and sparse row tags) in ``accumulators``: everything colocated with it."""
    out = [variable]
    for opt in optimizers:
        index = getattr(opt, "_index_dict", None)
        if index is not None:  # tf_keras optimizer: slot lists aligned with _index_dict
            key = opt._var_key(variable)  # pylint: disable=protected-access
            if key not in index:
                continue
            i = index[key]
            for value in vars(opt).values():
                if (isinstance(value, list) and len(value) == len(index)
                        and all(hasattr(s, "_v") for s in value)):
                    out.append(value[i])
        slots = getattr(opt, "_slots", None)
        if isinstance(slots, dict):  # legacy OptimizerV2: _slots[var_key][slot name]
            from tf_keras.src.optimizers.legacy.optimizer_v2 import _var_key

            out.extend(slots.get(_var_key(variable), {}).values())
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

    ``pool`` maps ``(id(wrapper), PS)`` to an inner variable the wrapper held there before
    (re-used by a move back)."""
    import tensorflow as tf
    from tensorflow.python.ops.resource_variable_ops import ResourceVariable

    from tf_hetero.policies.placement import ps_index

    w = _caching(wrapper)
    old = w._v  # pylint: disable=protected-access
    src = ps_index(old.device)
    if src == dst:
        return
    if "_unique_id" not in w.__dict__:  # tf_keras keys slots by it: keep it stable
        w._unique_id = old._unique_id  # pylint: disable=protected-access
    value = old.read_value()
    new = pool.get((id(w), dst))
    with tf.init_scope():
        if new is None:
            with tf.device(_device(dst)):
                # distribute_strategy: legacy optimizers' colocate_vars_with refuses a
                # variable created outside the strategy's scope.
                new = ResourceVariable(
                    value, trainable=old.trainable, name=old.name.split(":")[0],
                    dtype=old.dtype, constraint=old.constraint,
                    distribute_strategy=getattr(old, "_distribute_strategy", None))
        else:
            new.assign(value)
    pool[(id(w), src)] = old
    w._v = new  # pylint: disable=protected-access
    w._cache = None  # pylint: disable=protected-access


@functools.lru_cache(maxsize=1)
def _placement_state_class():
    """The checkpointed placement of one optimizer's variables (a ``PythonState``); one class,
    made once, so that a state already tracked can be recognized and re-bound."""
    import json

    import tensorflow as tf

    class PlacementState(tf.train.experimental.PythonState):
        """``{"num_ps": P, "ps": [PS of each variable, None if it cannot move]}``, read from
        and written to ``rebalancer`` (re-bound when the strategy's rebalancer changes: TF
        keeps restoring into the object first tracked under a name, even after an
        ``overwrite``, docs/PSLD.md)."""

        def __init__(self, rebalancer, optimizer):
            self.rebalancer, self._optimizer = rebalancer, weakref.ref(optimizer)

        def serialize(self):
            return json.dumps({"num_ps": self.rebalancer.num_ps,
                               "ps": [ps for _, ps in
                                      self.rebalancer.placement_of(self._optimizer())]})

        def deserialize(self, string_value):
            optimizer = self._optimizer()
            if optimizer is not None:
                self.rebalancer.pending[id(optimizer)] = (optimizer, json.loads(string_value))

    return PlacementState


class Rebalancer:
    """Runs a :class:`RebalanceController` inside a coordinator: counts training tasks, finds
    round boundaries, feeds the controller and carries out its moves."""

    def __init__(self, coordinator, controller):
        self.coordinator = coordinator
        self.controller = controller
        self.engine = coordinator.engine
        self.strategy = coordinator.strategy
        self.monitor = coordinator.monitor
        self.num_ps = tfcompat.strategy.num_ps(self.strategy)
        controller.bind(self.num_ps)
        install()
        if self.placement is not None:  # a scale_ps before this rebalancer: keep its PS set
            controller.active = tuple(self.placement.active)
        self.tasks = 0  # training tasks scheduled so far
        self.next_at = self._window_end(0)
        self._round_index = 0  # monitor.rounds consumed by the last decision
        self._totals = None  # emulated PS counters at the last decision
        self._pool: dict = {}
        self._keep: list = []  # functions traced before a move (kept alive)
        #: Every move made: ``(decision, unit, from PS, to PS, seconds the move took)``.
        self.moves: list[tuple] = []
        #: When each move was made, on the engine's clock (rounds opened later ran on it).
        self.move_times: list[float] = []
        #: Placements read from a checkpoint, applied at the next task: id -> (optimizer,
        #: saved record).
        self.pending: dict = {}
        self._tracked: dict = {}  # id(optimizer) -> (optimizer, its PlacementState)
        #: Seconds each boundary waited for the rounds in flight, and the moves' seconds.
        self.pauses: list[float] = []
        #: The PS tasks to use from the next round boundary on (``HeteroStrategy.scale_ps``).
        self.scale_to: tuple[int, ...] | None = None
        #: One dict per scaling carried out: active PS, moves, boundary wait and move
        #: seconds, and when (engine clock) the new placement took over.
        self.scalings: list[dict] = []
        #: Seconds each re-trace of the step after a move took (on the fit thread, before
        #: the first round on the new placement could open).
        self.retrace_s: list[float] = []
        self._retraces_told = 0  # retrace_s entries already given to the controller
        self._initial_done = False  # decision 0 made (before or after the first trace)
        # After a move: (task index from which to trace the applies ahead, their keys).
        self._prepare: tuple[int, list] | None = None

    @property
    def placement(self):
        """The strategy's placement records (``strategies/runtime/placement.py``), or None."""
        return getattr(self.strategy.extended, "placement", None)

    def _window_end(self, submitted: int) -> int:
        """The task count at which the next decision is due: the controller's next window
        (its first two are shorter), in rounds of one task per worker, after ``submitted``."""
        return submitted + self.controller.next_window() * self.engine.num_workers

    # -------------------------------------------------------------- schedule
    def before_task(self, fn, args, kwargs, entry):
        """Called by ``schedule`` for each training task before it is submitted; returns the
        entry to use (traced again after a move)."""
        submitted = self.tasks
        self.tasks += 1
        if self._prepare is not None and submitted >= self._prepare[0]:
            self._prepare_applies()
        if submitted == 0:
            # PS counters from the first task: the first window is measured too (with the
            # second, the controller can separate per-request cost from per-byte rates).
            self._load_since()
        self.track()  # may restore a placement read before the optimizer was tracked
        if submitted == 0 and not self.pending and self.scale_to is None:
            entry = self._initial(fn, args, kwargs, entry)
        if self.pending or self.scale_to is not None:
            t0 = time.monotonic()
            if self.at_boundary():
                moved = self.restore()
                if self.scale_to is not None:
                    moved = self.scale(submitted, time.monotonic() - t0) or moved
                if moved:
                    entry = self.retrace(fn, args, kwargs, submitted)
        if submitted < self.next_at:
            return entry
        t0 = time.monotonic()
        if not self.at_boundary():
            return entry  # earlier tasks do not fill whole rounds yet: try at the next one
        waited = time.monotonic() - t0
        moved = self.decide()
        self.next_at = self._window_end(submitted)
        self.pauses.append(waited)
        if moved:
            return self.retrace(fn, args, kwargs, submitted)
        return entry

    def before_trace(self) -> None:
        """Called by ``schedule`` before it traces a function it has not seen. Before the
        first training task of a ``fit`` whose model is built, decision 0
        (:meth:`_decide_initial`) runs here, on the model's trainable variables: the step is
        then traced once, on the new placement (decided after the trace, a move costs the
        step's second trace, ~0.7 s of the digits fit's start; docs/PSLD.md section 4). A
        model built by its first call (subclassed, no input shape) or a custom loop: decision
        0 after the trace (:meth:`_initial`)."""
        if self._initial_done or self.tasks or self.pending or self.scale_to is not None:
            return
        model = fitplan.fit_model(self.strategy)
        if model is None or not model.built or not model.trainable_variables:
            return
        self._initial_done = True
        optimizer = getattr(model, "optimizer", None)
        self._decide_initial(self.units(model.trainable_variables), pause_s=None,
                             optimizers=[optimizer] if optimizer is not None else [])

    def _initial(self, fn, args, kwargs, entry):
        """Decision 0 at the first training task, after its trace, unless
        :meth:`before_trace` made it: if it moves, the step is traced again on the new
        placement (the workers have not instantiated it yet)."""
        if self._initial_done:
            return entry
        self._initial_done = True
        if self._decide_initial(self.units(), pause_s=getattr(entry, "trace_s", None)):
            return self.retrace(fn, args, kwargs, 0)
        return entry

    def _decide_initial(self, units: dict, pause_s, optimizers=()) -> bool:
        """Decision 0 (:meth:`RebalanceController.initial`): times each emulated PS's
        service (``EmulatedServers.probe``, ~0.3 s) and makes the moves it calls for, weighed
        against ``pause_s`` (the re-trace they cost; ``None``: nothing traced yet). Nothing
        happens without emulated PS tasks (no service to time: the first decision comes
        after the first window, on the controller's rates) or with ``probe=False``. Returns
        whether anything moved."""
        servers = self.monitor.ps_servers
        if not self.controller.config.probe or servers is None:
            return False
        probed = servers.probe()
        moves = self.controller.initial(
            {k: (ps, load) for k, (ps, load, _) in units.items()}, probed,
            steps_per_round=self.engine.num_workers, pause_s=pause_s)
        self._make(moves, units, 0, optimizers)
        if moves:
            rates = " : ".join(f"{r:.2f}" for r in self.controller.rates)
            print(f"[tf-hetero] rebalance: PS service rates measured {rates}; moved "
                  f"{len(moves)} variables before the first round (decision 0: "
                  "strategy.rebalancer.controller.initial_decision).", flush=True)
        self._say_gap(units)
        return bool(moves)

    def _say_gap(self, units: dict) -> None:
        """Says, once, when decision 0 leaves the PS load uneven because the units are too
        coarse (``ps_load.gap`` above :data:`GAP_TO_SAY`), and the fix."""
        decision = self.controller.initial_decision or {}
        gap, largest = decision.get("gap"), decision.get("largest")
        if gap is None or gap <= GAP_TO_SAY:
            return
        partitioner = getattr(self.strategy.extended, "_variable_partitioner", None)
        fix = ("a finer variable_partitioner" if partitioner is not None else
               "a variable_partitioner (e.g. tf.distribute.experimental.partitioners."
               "MinSizePartitioner(min_shard_bytes=...))")
        print(f"[tf-hetero] rebalance: after decision 0 the busiest PS still serves {gap:.2f}x "
              "an even share of the load at the measured rates: whole variables cannot be "
              f"spread finer (largest: {largest}, {units[largest][1]:,.0f} B per step). "
              f"Give the strategy {fix}: shards are placed and moved one by one.", flush=True)

    def retrace(self, fn, args, kwargs, submitted: int):
        """After a move: drops the functions traced on the old placement and traces the
        task's step again. The applies are traced ahead once the first round's tasks are
        queued (:meth:`_prepare_applies`), while the workers instantiate the new step."""
        keys = self.invalidate()
        t0 = time.monotonic()
        entry = self.coordinator.tracer.entry(fn, args, kwargs)
        self.retrace_s.append(time.monotonic() - t0)
        self._prepare = (submitted + self.engine.num_workers, keys)
        return entry

    def _prepare_applies(self) -> None:
        """Traces the dropped apply functions again on a thread of their own (the fit thread
        goes on scheduling; the first round's close would otherwise trace its apply)."""
        _, keys = self._prepare
        self._prepare = None
        if keys:
            threading.Thread(target=self.coordinator.dispatcher.prepare_applies, args=(keys,),
                             daemon=True, name="tf-hetero-prepare-apply").start()

    def at_boundary(self, timeout: float = BOUNDARY_TIMEOUT_S) -> bool:
        """Waits for a round boundary (:meth:`RoundEngine.wait_boundary`): True when every
        task scheduled so far has finished and every round is applied, False when the tasks
        left pending cannot open a round without more tasks."""
        try:
            return self.engine.wait_boundary(timeout)
        except TimeoutError as e:
            raise TimeoutError(f"rebalancing: {e} Or turn rebalance off.") from e

    # -------------------------------------------------------------- decisions
    def units(self, variables=None) -> dict:
        """name -> ``(PS, bytes x accesses per step, variable)`` of every trained variable
        (of ``variables``, by default those the traced steps' optimizers train) that can
        move (a ``ShardedVariable`` the optimizer sees whole is left out)."""
        from tf_hetero.policies.placement import ps_index

        out = {}
        if variables is None:
            variables = [v for acc in self.coordinator.tracer.accumulators
                         for v in acc.variables]
        for v in variables:
            if not hasattr(v, "_v"):  # not a PS variable wrapper (e.g. ShardedVariable)
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

    def decide(self) -> bool:
        """Feeds the controller the window just measured; makes its moves. Returns whether
        anything moved."""
        rounds = self.monitor.rounds[self._round_index:]
        self._round_index = len(self.monitor.rounds)
        times = [r.t_applied - r.t_open for r in rounds if r.training]
        measured = self._load_since()
        # The re-traces since the last decision are part of its moves' pause (the rest shows
        # in this window's first round); the controller weighs the next moves against it.
        retraced = sum(self.retrace_s[self._retraces_told:])
        self._retraces_told = len(self.retrace_s)
        units = self.units()
        moves = self.controller.decide({k: (ps, load) for k, (ps, load, _) in units.items()},
                                       times, retrace_s=retraced or None, **measured)
        self._make(moves, units, self.controller.decisions)
        return bool(moves)

    def scale(self, submitted: int, waited_s: float) -> bool:
        """Carries out the pending :meth:`HeteroStrategy.scale_ps` at a boundary: every
        variable on a PS leaving the set moves to one that stays, load moves onto a PS that
        joins (``RebalanceController.scale``); the next decision measures a fresh window.
        Returns whether anything moved."""
        active, self.scale_to = self.scale_to, None
        measured = self._load_since()
        units = self.units()
        moves = self.controller.scale({k: (ps, load) for k, (ps, load, _) in units.items()},
                                      active, **measured)
        t0 = time.monotonic()
        self._make(moves, units, "scale")
        self._move_untrained(active)
        placement = self.placement
        if placement is not None:
            placement.set_active(active)
            left = sorted({name for name, ps, _ in placement.placed
                           if ps is not None and ps not in active})
            if left:  # said, not hidden: that PS cannot be released
                print(f"[tf-hetero] scale_ps({list(active)}): {len(left)} variables no "
                      f"optimizer trains stay where they are ({', '.join(left[:4])}"
                      f"{', ...' if len(left) > 4 else ''}), so their PS tasks still serve "
                      "reads. Variables that no optimizer updates are not moved.", flush=True)
        # The window after a scaling is measured afresh on the new set of PS tasks.
        self._round_index = len(self.monitor.rounds)
        self.next_at = self._window_end(submitted)
        self.scalings.append({"active": list(active), "moves": len(moves),
                              "waited_s": waited_s, "move_s": time.monotonic() - t0,
                              "t": self.engine.clock()})
        return bool(moves)

    def _move_untrained(self, active) -> None:
        """Moves the small variables nobody trains off a PS leaving the set, to the active PS
        with the least load: each optimizer's step counter (``iterations``, read by every
        apply) and each accumulator's bookkeeping (``tags``, ``counts``, ``gens``,
        ``received``: created beside its first variable, they do not follow it)."""
        from tf_hetero.policies.placement import ps_index

        placement = self.placement
        accumulators = self.coordinator.tracer.accumulators
        counters = [getattr(o, "iterations", None)
                    for o in dict.fromkeys(a.optimizer for a in accumulators)]
        counters += [getattr(a, k, None) for a in accumulators
                     for k in ("tags", "counts", "gens", "received")]
        for counter in counters:
            if counter is None or not hasattr(counter, "_v"):
                continue
            src = ps_index(counter.device)
            if src is None or src in active:
                continue
            dst = min(active, key=lambda p: (placement.loads[p] if placement else 0, p))
            t0 = time.monotonic()
            self._move_one(counter, dst)
            if placement is not None and (counter.name, src) in {
                    (n, q) for n, q, _ in placement.placed}:  # colocated ones are not
                self._placed(counter, src, dst, 1)
            self._record("scale", counter.name, src, dst, t0)

    def _load_since(self) -> dict:
        """What each emulated PS served since the last call (busy seconds, bytes, requests:
        the controller's rate estimate), as ``decide`` keywords; ``{}`` without emulated PS
        tasks or before the first snapshot."""
        totals = self.monitor.ps_totals()
        if totals is None:
            return {}
        before, self._totals = self._totals, totals
        if before is None:
            return {}
        d = psload.delta(before, totals)
        return {"busy_s": d["busy_s"], "served_bytes": d["bytes"],
                "requests": d.get("requests")}

    def _make(self, moves, units, label, optimizers=()) -> None:
        """Makes ``moves``, recording each under ``label`` (decision number, "scale")."""
        for move in moves:
            t0 = time.monotonic()
            self.move(units[move.unit][2], move.dst, optimizers)
            self._record(label, move.unit, move.src, move.dst, t0)

    def _record(self, label, unit, src: int, dst: int, t0: float) -> None:
        """One move made, started at ``t0`` (``time.monotonic``): in :attr:`moves` and
        :attr:`move_times`."""
        self.moves.append((label, unit, src, dst, time.monotonic() - t0))
        self.move_times.append(self.engine.clock())

    def _placed(self, variable, src: int, dst: int, requests: int) -> None:
        """The placement's records follow a variable moved from PS ``src`` to ``dst``
        (``requests`` per round: a trained variable is read and written, a counter read)."""
        self.placement.move(variable.name, src, dst,
                            int(variable.shape.num_elements() * variable.dtype.size), requests)

    def _move_one(self, wrapper, dst: int) -> None:
        """:func:`move_variable`, and the strategy's ``placement_generation`` goes up (tf_keras
        makes the functions that captured the old placement again, :func:`install`)."""
        move_variable(wrapper, dst, self._pool)
        self.strategy.placement_generation += 1

    def move(self, variable, dst: int, optimizers=()) -> None:
        """Moves ``variable`` with its slots (in ``optimizers`` and the traced steps'
        optimizers) and accumulators to PS ``dst``; the placement's records follow."""
        from tf_hetero.policies.placement import ps_index

        tracer = self.coordinator.tracer
        optimizers = list(dict.fromkeys([*optimizers,
                                         *(a.optimizer for a in tracer.accumulators)]))
        src = ps_index(variable.device)
        for w in related_variables(variable, optimizers, tracer.accumulators):
            self._move_one(w, dst)
        if self.placement is not None and src is not None:
            self._placed(variable, src, dst, 2 if variable.trainable else 1)

    # ------------------------------------------------------------ checkpoints
    def placement_of(self, optimizer) -> list:
        """``(variable, PS or None)`` of every variable ``optimizer`` trains, in its order."""
        from tf_hetero.policies.placement import ps_index

        return [(v, ps_index(v.device) if hasattr(v, "_v") else None)
                for acc in self.coordinator.tracer.accumulators if acc.optimizer is optimizer
                for v in acc.variables]

    def track(self) -> None:
        """Tracks the placement state under every optimizer trained so far (once each; a
        state an earlier rebalancer tracked is re-bound to this one). TF restores a
        placement a checkpoint holds for the optimizer right then (a deferred restore)."""
        cls = _placement_state_class()
        for acc in self.coordinator.tracer.accumulators:
            optimizer = acc.optimizer
            if id(optimizer) in self._tracked:
                continue
            state = optimizer._lookup_dependency(CHECKPOINT_KEY)  # pylint: disable=protected-access
            if isinstance(state, cls):
                state.rebalancer = self
            else:
                state = cls(self, optimizer)
                optimizer._track_trackable(state, CHECKPOINT_KEY)  # pylint: disable=protected-access
            self._tracked[id(optimizer)] = (optimizer, state)

    def restore(self) -> bool:
        """Moves every variable to the PS a restored checkpoint placed it on; returns whether
        anything moved. A placement that does not fit this cluster or model is reported in
        one line and left (the values were restored all the same)."""
        pending, self.pending = list(self.pending.values()), {}
        moved = False
        for optimizer, saved in pending:
            current = self.placement_of(optimizer)
            ps = saved.get("ps", [])
            if len(ps) != len(current) or any(p is not None and p >= self.num_ps for p in ps):
                print(f"[tf-hetero] rebalancing: the checkpoint's placement ({len(ps)} "
                      f"variables on {saved.get('num_ps')} PS) does not fit this model "
                      f"({len(current)} variables) on {self.num_ps} PS; the current placement "
                      "is kept.", flush=True)
                continue
            for (variable, now), want in zip(current, ps):
                if want is None or now is None or now == want:
                    continue
                t0 = time.monotonic()
                self.move(variable, want)
                self.moves.append(("restore", variable.name, now, want, time.monotonic() - t0))
                self.move_times.append(self.engine.clock())
                moved = True
        return moved

    def invalidate(self) -> list:
        """Drops the traced functions that captured the old placement (kept alive); returns
        the keys (accumulator sets) of the apply functions dropped."""
        tracer, dispatcher = self.coordinator.tracer, self.coordinator.dispatcher
        with dispatcher._apply_lock:  # pylint: disable=protected-access
            keys = list(dispatcher._apply_fns)  # pylint: disable=protected-access
            self._keep.append((dict(tracer.entries), dict(dispatcher._apply_fns),  # pylint: disable=protected-access
                               dict(dispatcher._drain_fns)))  # pylint: disable=protected-access
            tracer.entries.clear()
            self.coordinator.closures.clear()  # copies would run the old traces
            dispatcher._apply_fns.clear()  # pylint: disable=protected-access
            dispatcher._drain_fns.clear()  # pylint: disable=protected-access
        return keys
