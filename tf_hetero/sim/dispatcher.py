"""The simulated TF side: a :class:`~tf_hetero.engine.api.Dispatcher` whose workers,
closure queues, chief and parameter servers live on virtual time (:mod:`.events`).

It plays the part of :mod:`tf_hetero.strategies.runtime` (dispatcher, worker threads) for
the real :class:`~tf_hetero.engine.RoundEngine`: the engine decides everything (which
worker, when a round closes, what an apply carries) and this class only makes time pass
and reports back (``task_started``, ``task_finished``, ``apply_finished``), each report as an
event, never from inside an engine call. Like TF's, each worker runs one closure at a time
from its own (tagged) queue, in order; a stale step still runs (it writes nothing); applies
run on the chief, one at a time in submission order (the runtime's applier).

Durations come from the :class:`~tf_hetero.sim.costs.CostModel`; with a
:class:`~tf_hetero.sim.learner.Learner`, gradients really flow (statistical model).

>>> from tf_hetero.emulation.profile import Profile
>>> from tf_hetero.engine import RoundEngine
>>> from tf_hetero.policies import AllTasks, OnePerWorker
>>> from tf_hetero.sim.costs import CostModel
>>> from tf_hetero.sim.events import EventLoop
>>> loop = EventLoop()
>>> d = SimDispatcher(loop, CostModel(), Profile.parse("slow=1:4"), 2, batch_size=32)
>>> engine = RoundEngine(2, AllTasks(), OnePerWorker(), d, clock=loop)
>>> d.engine = engine
>>> _ = [engine.submit(i) for i in range(4)]
>>> engine.flush(); loop.run(engine.idle)
True
>>> len(engine.rounds), round(loop(), 2)            # two rounds, each set by the 4x worker
(2, 1.63)
"""

from __future__ import annotations

import collections
import math

import numpy as np

from tf_hetero.engine.state import PUSH_ALL, PUSH_OLD

__all__ = ["SimDispatcher", "LAUNCHES"]

#: How a round's tasks reach their workers (docs/decisions/0017-rounds-at-scale.md).
LAUNCHES = ("closures", "tokens")


class _Closure:
    """What a simulated worker thread runs: one step (``task``)."""

    __slots__ = ("task", "fresh", "params")

    def __init__(self, task):
        self.task, self.fresh, self.params = task, False, None


class SimDispatcher:
    """Implements :class:`tf_hetero.engine.api.Dispatcher` on virtual time.

    Args:
      loop: the :class:`~tf_hetero.sim.events.EventLoop` (also the engine's clock).
      costs: the :class:`~tf_hetero.sim.costs.CostModel`.
      profile: a :class:`~tf_hetero.emulation.profile.Profile` (device times, links).
      num_workers, num_ps: the cluster.
      batch_size: samples of one dataset batch (the profile's ``base_ms`` is its time).
      granule: samples per work unit of a sized task (``None``: a task is one batch).
      steps_per_execution: batches per unsized closure.
      engine_path: tasks go through the engine's tagged queues (False: TF's own closure
        queue, stock PSS and ASP).
      codec: push codec of the H-PS buffer path; ``local``: that path is on.
      learner: optional :class:`~tf_hetero.sim.learner.Learner`.
      seed: seed of the steps' random delays (``CostModel.jitter_quantiles_s``).
      launch: ``"closures"`` (the chief launches each task's closure, ``dispatch_s``) or
        ``"tokens"`` (each task is a token to its worker's long-running closure:
        ``token_task_s`` of the chief per task, ``token_round_s`` per apply,
        ``token_ps_task_s`` of the service of worker w's PS ``w % num_ps``, where the
        carriers keep its lane's queues; engine-path rounds only,
        :class:`~tf_hetero.sim.run.Simulation` checks).
    """

    def __init__(self, loop, costs, profile, num_workers: int, num_ps: int = 2, *,
                 batch_size: int = 32, granule: int | None = None, steps_per_execution: int = 1,
                 engine_path: bool = True, local: bool = False, codec: str = "fp32",
                 learner=None, seed: int = 0, launch: str = "closures"):
        from tf_hetero.sim.costs import DeviceTimes

        if launch not in LAUNCHES:
            raise ValueError(f"launch={launch!r}: expected one of {', '.join(LAUNCHES)}.")
        tokens = launch == "tokens"
        #: What the chief pays to start one engine task, and each apply beyond its own cost.
        self._task_launch_s = costs.token_task_s if tokens else costs.dispatch_s
        self._round_launch_s = costs.token_round_s if tokens else 0.0
        #: What the PS holding a lane's token queues serves per task (as the carriers).
        self._token_ps_s = costs.token_ps_task_s if tokens else 0.0

        self.loop, self.costs = loop, costs
        self.device = DeviceTimes(profile, num_workers)
        self.num_workers, self.num_ps = num_workers, num_ps
        self.batch_size, self.granule, self.k = batch_size, granule, steps_per_execution
        self.engine_path, self.local = engine_path, local
        self.push_ratio = costs.codec_ratio(codec)
        self.learner = learner
        self.param_bytes = learner.param_bytes if learner is not None else costs.param_bytes
        self.engine = None  # set by the owner once the engine exists
        self._queues = [collections.deque() for _ in range(num_workers)]
        self._active = [False] * num_workers  # a closure runs or is being launched
        self._steps = [0] * num_workers  # emulated steps run per worker (the profile's t)
        self._chief_free = 0.0
        self._applier_free = 0.0
        self._ps_free = [0.0] * num_ps
        self._traced = set()  # closure kinds whose function was traced already
        self._rng = np.random.default_rng(seed)  # the steps' jitter, reproducible
        # Buffer-path pushes draw from their own stream, so the rows without them keep theirs.
        self._push_rng = np.random.default_rng([seed, 1])
        self._jitter = iter(())
        self.bytes_to_ps = 0.0
        self.bytes_from_ps = 0.0

    # ------------------------------------------------------------- Dispatcher
    def dispatch(self, task, worker, round_id):
        self._queues[worker].append(_Closure(task=task))
        if not self._active[worker]:  # its thread takes it (_launch calls no engine method)
            self._active[worker] = True
            self._launch(worker)

    def dispatch_apply(self, round_id, lanes, folds):
        """Applies run on the chief, one at a time in order (the runtime's applier)."""
        ps = len(lanes) * self.param_bytes / self.num_ps * self.costs.ps_s_per_byte
        start = max(self.loop.now, self._applier_free)
        self._applier_free = (start + self.costs.apply_s + self._round_launch_s + ps
                              + self._first("apply"))
        self.loop.at(self._applier_free, self._applied, round_id, dict(lanes), dict(folds))

    def cancel(self, task):
        pass  # a cancelled task never reaches a queue here: nothing to undo

    def absorb(self, task, like):
        pass  # a simulated step has no result to hand on

    def duplicate(self, task):
        return ("copy", task.payload)

    def drain(self, worker):
        return ("drain", worker)

    # ---------------------------------------------------------------- workers
    def _launch(self, worker):
        queue = self._queues[worker]
        if not queue:
            self._active[worker] = False
            return
        closure = queue.popleft()
        # The chief launches closures one at a time (one Python coordinator); under the
        # token launch it only hands the task's token on.
        start = max(self.loop.now, self._chief_free)
        self._chief_free = start + (self._task_launch_s if self.engine_path
                                    else self.costs.dispatch_s)
        begin = self._chief_free
        if self._token_ps_s and self.engine_path:  # the token's way through its lane's PS
            # the carriers' layout: lane l's queues on PS l % P
            begin = self._serve(worker % self.num_ps, begin, self._token_ps_s)
        self.loop.at(begin, self._begin, worker, closure)

    def _begin(self, worker, c):
        now = self.loop.now
        task = c.task
        c.fresh = self.engine.task_started(task, worker)
        duration = self._step_s(worker, task)
        if self.learner is not None and c.fresh and not task.drain:
            c.params = self.learner.params  # what the step reads as it starts
            if task.round is not None and task.push & PUSH_OLD:
                self._push(worker, task)  # the previous round's buffer, during the compute
        self.loop.at(now + duration, self._end, worker, c)

    def _end(self, worker, c):
        if self.learner is not None and c.fresh:
            self._learn(worker, c.task, c.params)
        self.engine.task_finished(c.task, worker)
        self._launch(worker)  # the worker thread takes its next closure, if any

    def _applied(self, round_id, lanes, folds):
        engine = self.engine
        rnd = engine.rounds[round_id]
        sample = None
        if self.learner is not None:
            applied, norm, sample = self.learner.apply_round(
                round_id, rnd.slot, lanes, folds, scale=getattr(rnd, "scale", 1.0),
                max_norm=getattr(rnd, "max_norm", 0.0), velocity=getattr(rnd, "velocity", 1.0))
        else:
            applied, norm = sum(lanes.values()), None
            applied += sum(engine.rounds[r].lanes.get(lane, 0)
                           for (lane, _), (r, w) in folds.items() if w > 0)
        engine.apply_finished(round_id, applied, grad_norm=norm, gradient=sample)

    # ------------------------------------------------------------------ costs
    def _first(self, kind) -> float:
        """Tracing: the first closure of a function costs ``first_apply_s`` once."""
        if kind in self._traced:
            return 0.0
        self._traced.add(kind)
        return self.costs.first_apply_s

    def _rows(self, task) -> float:
        if self.granule is not None:
            return task.size * self.granule
        return task.size * self.k * self.batch_size

    def _serve(self, p: int, at: float, seconds: float) -> float:
        """PS ``p`` (a FIFO server) serves ``seconds`` of work arriving at ``at``; returns
        when it is done."""
        self._ps_free[p] = max(self._ps_free[p], at) + seconds
        return self._ps_free[p]

    def _ps_s(self, nbytes: float) -> float:
        """Wait plus service of ``nbytes`` spread over the PS (each a FIFO server)."""
        if not nbytes:
            return 0.0
        now, per_ps = self.loop.now, nbytes / self.num_ps * self.costs.ps_s_per_byte
        done = now
        for p in range(self.num_ps):
            done = max(done, self._serve(p, now, per_ps))
        return done - now

    def _step_s(self, worker, task) -> float:
        costs, link = self.costs, self.device.link_us_per_byte[worker] * 1e-6
        pushes = self.local and task.push & (PUSH_ALL | PUSH_OLD)
        push_bytes = self.param_bytes * self.push_ratio if pushes else 0.0
        if task.drain:  # a push-only closure: no step, no data
            self.bytes_to_ps += push_bytes
            return (costs.task_s + self._first("drain") + self._push_s()
                    + push_bytes * link + self._ps_s(push_bytes))
        t = self._steps[worker]
        self._steps[worker] += 1
        rows = self._rows(task)
        device = self.device.device_s(worker, t, rows, self.batch_size)
        if not self.local:
            push_bytes = self.param_bytes  # every step pushes its gradient
        read_bytes = self.param_bytes
        self.bytes_to_ps += push_bytes
        self.bytes_from_ps += read_bytes
        return (max(0.0, (costs.task_s if self.engine_path else costs.stock_s) + self._delay())
                + device
                + (costs.first_task_s if t == 0 else 0.0)
                + (self._push_s() if pushes else 0.0)
                + (read_bytes + push_bytes) * link + self._ps_s(read_bytes + push_bytes))

    def _push_s(self) -> float:
        """One buffer-path push: its median time plus its own normal variation."""
        c = self.costs
        if not c.local_push_jitter_s:
            return c.local_push_s
        return c.local_push_s + max(-c.local_push_s,
                                    float(self._push_rng.normal(0.0, c.local_push_jitter_s)))

    def _delay(self) -> float:
        """A step's random delay around its median, from the measured quantiles (drawn in
        blocks; a step never gets shorter than its device time)."""
        try:
            return next(self._jitter)
        except StopIteration:
            q = self.costs.jitter_quantiles_s
            u = self._rng.random(4096) * (len(q) - 1)
            self._jitter = iter(np.interp(u, np.arange(len(q)), q).tolist())
            return next(self._jitter)

    # ----------------------------------------------------------- gradients
    def _learn(self, worker, task, params):
        """The finished step's gradient takes the runtime's path (see :mod:`.learner`)."""
        m = self.learner
        if task.round is None:  # an async step applies its own gradient at its end
            m.apply_async(m.gradient(params, worker, self._rows(task)))
            return
        if not task.drain:
            units = task.size * (self.k if self.granule is None else 1)
            g = m.gradient(params, worker, self._rows(task)) * units
            if self.local:  # a local buffer holds no loss (as the runtime's)
                m.hold(worker, g, units)
            else:
                self._write(task, g, units, m.batch_loss * units)
        if self.local and task.push & PUSH_ALL:
            self._push(worker, task)

    def _push(self, worker, task):
        held = self.learner.take(worker)
        if held is not None:
            self._write(task, *held)

    def _write(self, task, g, units, loss_sum=math.nan):
        slot = self.engine.rounds[task.round].slot
        self.learner.write(task.lane_id, slot, task.round, g, units, loss_sum)
