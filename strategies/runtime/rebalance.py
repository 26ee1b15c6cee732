"""Live rebalancing and elastic PS scaling inside a running ``fit``: the rebalancer finds
round boundaries, feeds the controller (:class:`tf_hetero.policies.rebalance.RebalanceController`)
what was measured and carries out its moves (:mod:`moves`).

- **Round boundaries.** Closures already queued hold the functions traced on the old
  placement, so a move happens only when the engine is idle: every task submitted so far
  finished and every round applied (:meth:`Rebalancer.at_boundary`), found at a
  ``schedule`` call whose earlier tasks fill whole rounds.
- **The pause.** After a move the step (tf-hetero's accumulating variant of
  ``train_function``, :mod:`tracing`), the round apply and H-PS drain functions are dropped
  from their caches and the next task is traced again on the new placement; the applies are
  traced ahead on a thread of their own. The old functions are kept referenced (a
  tf.function garbage-collected during fit stalls on blocking RPCs, TF_INTERNALS.md).
  tf_keras's test and predict functions are made again too (:mod:`remake`).
- **Decision 0.** Before the first round (with emulated PS tasks) each PS's service is timed
  and the controller's decision 0 moves what it calls for, before the step's first trace
  when the model is built (:meth:`Rebalancer.before_trace`).
- **Checkpoints** carry the placement (:mod:`placement_state`); a restored placement is
  moved back at the next task.
- **Elastic PS scaling** (docs/PSLD.md section 5): TensorFlow cannot add a PS task to a
  running cluster, so the PS tasks a fit may use are listed in TF_CONFIG and some stand by.
  ``HeteroStrategy.scale_ps`` names the active set; the next task, at a round boundary,
  moves every variable off a PS leaving the set and load onto a PS joining it (``moves``
  entries with decision ``"scale"``), the same way as a rebalancing move.
"""

from __future__ import annotations

import threading
import time

from tf_hetero import tfcompat
from tf_hetero.strategies.runtime import fitplan
from tf_hetero.strategies.runtime.moves import Mover, movable_units
from tf_hetero.strategies.runtime.placement_state import CHECKPOINT_KEY, PlacementState
from tf_hetero.strategies.runtime.remake import install
from tf_hetero.telemetry import psload

__all__ = ["Rebalancer", "CHECKPOINT_KEY"]

#: Seconds a boundary waits for the rounds in flight before giving up with an error.
BOUNDARY_TIMEOUT_S = 600.0

#: Decision 0 says the units are too coarse when the busiest PS is left above this share of
#: an even spread (the placement target is max/mean <= 1.05).
GAP_TO_SAY = 1.05


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
        self.mover = Mover(self.strategy, coordinator.tracer, self._record)
        #: The placement a checkpoint carries (saved and restored under each optimizer).
        self.state = PlacementState(coordinator.tracer, self.num_ps)
        if self.placement is not None:  # a scale_ps before this rebalancer: keep its PS set
            controller.active = tuple(self.placement.active)
        self.tasks = 0  # training tasks scheduled so far
        self.next_at = self._window_end(0)
        self._round_index = 0  # monitor.rounds consumed by the last decision
        self._totals = None  # emulated PS counters at the last decision
        #: Every move made: ``(decision, unit, from PS, to PS, seconds the move took)``.
        self.moves: list[tuple] = []
        #: When each move was made, on the engine's clock (rounds opened later ran on it).
        self.move_times: list[float] = []
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
        return self.mover.placement

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
        self.state.track()  # may restore a placement read before the optimizer was tracked
        if submitted == 0 and not self.state.pending and self.scale_to is None:
            entry = self._initial(fn, args, kwargs, entry)
        if self.state.pending or self.scale_to is not None:
            t0 = time.monotonic()
            if self.at_boundary():
                moved = self.state.restore(self._restore_move)
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
        if self._initial_done or self.tasks or self.state.pending or self.scale_to is not None:
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
        fix = ("a finer variable_partitioner"
               if tfcompat.strategy.variable_partitioner(self.strategy) is not None else
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
        if variables is None:
            variables = [v for acc in self.coordinator.tracer.accumulators
                         for v in acc.variables]
        return movable_units(variables)

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
        self.mover.move_untrained(active)
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

    def move(self, variable, dst: int, optimizers=()) -> None:
        """Moves ``variable`` with its slots and accumulators to PS ``dst``
        (:meth:`Mover.move`)."""
        self.mover.move(variable, dst, optimizers)

    def _restore_move(self, variable, src: int, dst: int) -> None:
        """One move back to where a restored checkpoint placed ``variable``."""
        t0 = time.monotonic()
        self.move(variable, dst)
        self._record("restore", variable.name, src, dst, t0)

    def invalidate(self) -> list:
        """Drops the traced functions that captured the old placement
        (``HeteroCoordinator.forget_traces``); returns the keys of the applies dropped."""
        return self.coordinator.forget_traces()
