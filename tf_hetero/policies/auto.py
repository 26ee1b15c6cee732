"""The adaptive strategy's controller: how to synchronize, how large a round's batch and how
hard its step, chosen from what the monitor measures. Pure Python; the real runtime and the
simulator run the same object (the engine's sync policy, assignment policy, update scale and
a component at once).

Two modes: ``sized`` rounds (each round's global batch split across the workers in
proportion to their speed, H-PS's :class:`~tf_hetero.policies.assign.BalancedBatches`, and
applied as one step on the whole batch) and ``async`` steps (exactly stock PSS's); the sync
policy's ``mode`` is ``"rounds"`` or ``"async"``. The runtime makes each task's closure for
the mode current when ``fit`` schedules it and the engine runs every task the way it was
made, so no closure runs in a mode it was not made for (an accumulating step run
asynchronously would apply nothing); at most :attr:`AutoController.max_pending` tasks are
queued, so a switch takes effect within a round or two.

What it decides, each from the monitor's measurements (docs/AUTO.md has the derivations
and the measurements behind every default):

- **how to synchronize** (:meth:`AutoController.after_event`): ``sized`` while the workers'
  speeds differ persistently (each worker's lower quartile of time per unit over its last
  ``window`` tasks, the slowest over the fastest: ``sized_above`` / ``async_below``, with
  hysteresis); a sized round closes without a task past ``cutoff`` x its projected time
  (:meth:`should_close`), folds the late share into a later round and plans around its
  worker (:meth:`plan`). By default a fit stays in sized rounds (``async_below=1``);
- **how large a round's batch** (sized mode): Pollux's goodput, throughput ``M / (M/C +
  T_o)`` times efficiency ``(B + b0) / (B + M)``, largest at ``M* = sqrt(C x T_o x B)``
  (:func:`optimal_batch`; ``C`` the workers' capacity, ``T_o`` a round's own cost, ``B`` the
  gradient noise scale of :mod:`tf_hetero.policies.noise`), in whole dataset batches, one to
  ``max_batches`` per worker, re-chosen every ``decide_every`` sized rounds when ``min_gain``
  better;
- **how hard a step** (:meth:`scale`): AdaScale's gain ``r`` of the round's batch over the
  user's one-batch rate, times the asynchronous rate's correction ``1 + tau`` ramped in over
  ``1 + tau`` rounds (``async_tuned``), at most ``max_step`` x the linear rule, and under the
  edge of stability the rounds measure (``unstable``,
  :class:`~tf_hetero.policies.stability.StepCeiling`); a back-off restarts the optimizer's
  momentum (:meth:`velocity`), so the smaller step acts at once.

>>> c = AutoController(AutoConfig(window=4, async_tuned=False, start="async"))
>>> c.bind(num_workers=2, step_units=4, unit_samples=8)
>>> class M:                     # worker 1 takes 4x as long per unit
...     noise, rounds, tasks = None, [], []
...     def unit_times(self, w, last=None): return [0.01 * (1 + 3 * w)] * 4
>>> class Engine:
...     monitor, live_workers, num_live, num_workers, version = M(), [0, 1], 2, 2, 8
>>> c.attach(Engine())
>>> c.mode, c.after_event(None), c.mode
('async', None, 'rounds')
>>> c.lines[-1]
'rounds sized by speed: worker 1 is 4.0x slower than the fastest (lower quartile per unit over 4 tasks)'
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from tf_hetero.engine.api import Component
from tf_hetero.policies.assign import BalancedBatches
from tf_hetero.policies.auto_config import AutoConfig, optimal_batch
from tf_hetero.policies.stability import StepCeiling

__all__ = ["AutoConfig", "AutoController", "optimal_batch"]


class AutoController(BalancedBatches, Component):
    """Chooses the mode, the sized rounds' global batch and their step gain (module notes).

    The engine's sync policy (:attr:`mode`, :meth:`should_close`: a sized round waits for
    its tasks up to the cut-off), its assignment policy (the global batch split by speed,
    which this object sets between rounds), its update scale (:meth:`scale`: the step's
    gain) and a component (:meth:`after_event`: the decisions, after every task or round)."""

    def __init__(self, config: AutoConfig | None = None):
        BalancedBatches.__init__(self)
        self.config = config or AutoConfig()
        self.num_workers = 0
        self.unit_samples = 1.0
        self.mode = self.config.start  # the sync policy's mode: "async" or "rounds" (sized)
        self._batch_decided_at = 0  # sized rounds seen at the last batch choice
        self._asked = None  # the engine's update count when the mode was last decided
        self._start: str | None = None  # the starting decision, said at the first event
        self._seen = None  # what was measured at the last decision (after_event)
        self._shortest = None  # (round, its smallest projected task time): should_close
        self._holder = None  # (round, the task that held it at should_close's last look)
        self._sized = (None, 0, [])  # (monitor, rounds scanned, sized rounds): _sized_rounds
        self.gain_now = 1.0
        #: ``1 + tau`` (``async_tuned``): the one-batch rate's correction for fresh steps.
        self.correction = 1.0
        #: Sized rounds applied since the correction was last set (its ramp, :meth:`_gain`).
        self._ramped = 0
        self._ramp_start = 0  # sized rounds seen when it was set
        #: The step's measured edge of stability (None: ``unstable=0``).
        self.ceiling = StepCeiling(self.config.unstable) if self.config.unstable else None
        self._checked = 0  # sized rounds the ceiling has seen
        self._velocity = 1.0  # the next round's factor on the velocity (velocity)
        #: ``(updates applied, mode, global batch in samples, gain, why)`` per change.
        self.decisions: list[tuple] = []
        #: The lines said when a decision changed (the strategy prints them).
        self.lines: list[str] = []
        self.say = None  # the strategy's printer of those lines (None: kept only)

    # ------------------------------------------------------------------- setup
    def bind(self, num_workers: int, step_units: int, unit_samples: float) -> None:
        """The cluster and the data, once known: ``step_units`` units per dataset batch, of
        ``unit_samples`` samples each. The first global batch is one dataset batch per
        worker (BSP's); a later fit on the same data keeps the one chosen since."""
        same = (self.units is not None and self.step_units == step_units
                and self.num_workers == num_workers)
        self.num_workers, self.unit_samples = num_workers, float(unit_samples)
        self.set_units(self.units if same else num_workers * step_units, step_units)
        if not same and self.config.unstable:
            self.ceiling, self._checked = StepCeiling(self.config.unstable), 0
        if not same and self.mode == "rounds":  # started sized: no staleness measured
            why = self._correct(None)
            self.gain_now = self._gain(None, self.units, step_units)
            self._start = (f"starts with rounds sized by speed, global batch "
                           f"{self.global_batch} samples (one dataset batch per worker){why}")

    def set_units(self, units: int, step_units: int | None = None) -> None:
        """The sized rounds' global batch (whole dataset batches; :meth:`bind` and the
        strategy's data set it first, the controller afterwards)."""
        if self.num_workers and step_units and units < self.num_workers * step_units:
            units = self.num_workers * step_units  # a round takes a step per task at least
        super().set_units(units, step_units)

    @property
    def bound(self) -> bool:
        return self.step_units is not None

    @property
    def global_batch(self) -> int | None:
        """The sized rounds' global batch in samples (``None`` before :meth:`bind`)."""
        return None if self.units is None else int(self.units * self.unit_samples)

    @property
    def max_pending(self) -> int:
        """Tasks the strategy keeps queued at most: the largest round's steps and one more
        per worker, so that a mode switch reaches the tasks within a round or two."""
        steps = self.config.max_batches * max(self.num_workers, 1)
        return steps + max(self.num_workers, 1)

    # --------------------------------------------------------------- sync policy
    #: Its mode changes during a fit: the runtime makes each task for the mode current when
    #: it is scheduled, and keeps at most :attr:`max_pending` queued.
    switches = True

    def should_close(self, rnd, now: float) -> bool:
        """A sized round closes when all its tasks are done, or when half its units are and
        every task still out has run ``cutoff`` times its projected time (the late ones are
        folded into a later round).

        Each task's lateness counts from its own start, as EPSP's task transfer does: on many
        workers the chief starts a round's tasks over a spread (its launches take turns), and
        a task started last is not a straggler for it (counted from the round's open, its
        on-time share would be folded and taken stale at the step's cap; docs/AUTO.md,
        section 4)."""
        if rnd.all_done:
            return True
        cutoff = self.config.cutoff
        if not cutoff or not rnd.expected_s > 0:
            return False
        # No task is late before the round has run the cut-off times its shortest projected
        # task time (a task starts at the open or later): checked first, without reading the
        # round's tasks, as the engine asks at every tick.
        if self._shortest is None or self._shortest[0] is not rnd:
            known = [x for x in rnd.task_s.values() if x is not None and x > 0]
            self._shortest = (rnd, min(known) if known else rnd.expected_s)
        if now < rnd.t_open + cutoff * self._shortest[1]:
            return False
        # The task that held the round at the last look, the one expected to end last: while
        # it still holds it, so does the round (O(1); a look through every task at every tick
        # and event was O(N^2) a round, ~0.6 ms of the chief's Python per task at 1000
        # workers).
        held = self._holder
        if (held is not None and held[0] is rnd and held[1].round == rnd.id
                and _holds(held[1], rnd, now, cutoff)):
            return False
        units_in = units_out = 0
        holder, holder_end = None, -math.inf
        for t in rnd.tasks:
            if t.state == "done":  # (a str enum)
                units_in += t.size
                continue
            units_out += t.size
            if _holds(t, rnd, now, cutoff):  # not started, or not late yet: the round waits
                projected = _projected(rnd, t)
                end = (t.t_start + projected if t.state == "running" and projected
                       else math.inf)  # (a task that holds the round has projected > 0)
                if end > holder_end:
                    holder, holder_end = t, end
        if holder is not None:
            self._holder = (rnd, holder)
            return False
        return units_in >= units_out

    def plan(self, ctx, units: int | None = None):
        """A sized round split across the live workers; with a cut-off, a worker still
        running a late share sits the round out (its task would start only after that
        share, and the round would wait for it after all) while another worker is free."""
        engine = getattr(self, "engine", None)
        if self.config.cutoff and ctx.idle and engine is not None:
            def running_late(w):
                return any(t.round is not None and engine.rounds[t.round].closed
                           for t in engine.running(w))

            ctx = dataclasses.replace(ctx, busy=tuple(w for w in ctx.busy
                                                      if not running_late(w)))
        return super().plan(ctx, units)

    overlap = False
    #: Asynchronous steps a worker holds (running and queued): its next step waits on its
    #: own queue, as under stock PSS, not for the engine to hand it over (engine/core.py).
    async_depth = 2

    # ---------------------------------------------------------- assignment policy
    def steps(self, round_id: int, units: int | None = None) -> int | None:
        """Steps of ``fit`` a sized round covers: its global batch in dataset batches."""
        if self.step_units is None:
            return None
        return (self.units if units is None else units) // self.step_units

    # ------------------------------------------------------------ update scale
    def scale(self, group_size: int, num_workers: int, staleness: float,
              fraction: float = 1.0) -> float:
        """The step of a sized round over the one-batch rate: the gain of its batch, times
        the share of its planned units it applies."""
        return self.gain_now * min(max(fraction, 0.0), 1.0)

    def max_norm(self) -> float:
        """The largest mean-gradient norm (before the step) a sized round applies: a round
        whose gradient spikes past the edge-of-stability factor times the median of the
        rounds before is clipped to it (its update would undo what training reached before
        the step backs off); 0 (no bound) until measured, or with ``unstable=0``."""
        return 0.0 if self.ceiling is None or self.mode != "rounds" else self.ceiling.max_norm

    def velocity(self) -> float:
        """The factor on the optimizer's velocity before the next round's update (asked
        once per round that has an apply, at its close): after a back-off 0, the momentum
        restarted (``AutoConfig(restart=False)``: the new step over the one taken), then 1
        again; 1 otherwise.

        Why: tf_keras' SGD keeps its velocity in weight units (``m = momentum m - lr g;
        w += m``), so a smaller step scales only the new gradients while the velocity the
        unstable steps built keeps moving the weights, decaying by ``momentum`` (0.9: half
        of it after 7 rounds); a back-off comes when the loss or the gradient rises, where
        accelerated methods restart their momentum (O'Donoghue and Candes 2015). In the
        simulator's learner at 6x the bench's rate, fits that collapsed: 4 and 3 of 40 (8
        and 16 workers) with the velocity scaled with the step, none restarted; on the
        cluster, restarted against scaled, ``equal_capacity`` 1.08x sooner, ``classes``
        and ``workers8`` level (docs/AUTO.md, section 2)."""
        out, self._velocity = self._velocity, 1.0
        return out

    # ----------------------------------------------------------------- figures
    def summary(self, rounds, num_workers: int) -> dict:
        """Numbers only (Keras logs and TensorBoard take scalars): ``auto_sized`` is 1 while
        rounds are sized, 0 while steps are asynchronous."""
        return {"auto_sized": float(self.mode == "rounds"),
                "auto_global_batch": self.global_batch or 0, "auto_gain": self.gain_now,
                "auto_decisions": len(self.decisions)}

    # --------------------------------------------------------------- decisions
    def after_event(self, book=None) -> None:
        """After a task ended or a round closed: re-decide the mode (at most once per
        worker's worth of updates) and, in sized mode, the global batch."""
        engine = getattr(self, "engine", None)
        monitor = getattr(engine, "monitor", None)
        if engine is None or monitor is None or not self.bound:
            return
        # The engine's ticker calls this every few ms for the cut-off: decide only when
        # something was measured since (a task or a round recorded, an update, a worker
        # joining or leaving); the decisions read nothing else. Deciding on every tick cost
        # the chief ~0.1 core on one_slow (benchmarks/results/2026-12-02-auto-suite).
        seen = (engine.version, len(monitor.tasks), len(monitor.rounds), engine.num_live)
        if seen == self._seen and self._start is None:
            return
        self._seen = seen
        if self._start is not None:  # said once the fit runs (the engine exists by then)
            why, self._start = self._start, None
            self._record(engine, monitor, why)
        n = engine.num_workers
        if self.mode == "rounds" or self._asked is None or engine.version - self._asked >= n:
            self._asked = engine.version
            self._decide_mode(engine, monitor)
        if self.mode == "rounds":
            self._decide_batch(engine, monitor)

    def speeds(self, monitor, live) -> dict[int, float]:
        """Each live worker's lower quartile of seconds per unit over its last ``window`` tasks (only
        workers with at least half a window measured)."""
        w = self.config.window
        out = {}
        for worker in live:
            times = monitor.unit_times(worker, last=w)
            if len(times) >= max(2, w // 2):
                out[worker] = sorted(times)[(len(times) - 1) // 4]
        return out

    def _decide_mode(self, engine, monitor) -> None:
        live = list(engine.live_workers)
        speeds = self.speeds(monitor, live)
        if len(speeds) < len(live) or len(speeds) < 2:
            return  # not every live worker measured yet: keep the mode
        slow = max(speeds, key=speeds.get)
        spread = speeds[slow] / max(min(speeds.values()), 1e-12)
        c = self.config
        if self.mode == "async" and spread >= c.sized_above:
            self._change(engine, monitor, "rounds", (
                f"rounds sized by speed: worker {slow} is {spread:.1f}x slower than the "
                f"fastest (lower quartile per unit over {len(monitor.unit_times(slow, c.window))} "
                "tasks)"))
        elif self.mode == "rounds" and spread < c.async_below:
            self._change(engine, monitor, "async", (
                f"asynchronous steps: the workers are within {spread:.2f}x of each other "
                "(transient delays are not waited for)"))

    def _decide_batch(self, engine, monitor) -> None:
        """Every ``decide_every`` sized rounds: the global batch of largest goodput, and the
        gain of the batch in use."""
        c, noise, base = self.config, getattr(monitor, "noise", None), self.step_units
        rounds = self._sized_rounds(monitor)
        self._ramped = len(rounds) - self._ramp_start
        self._check_stability(engine, monitor, rounds)
        self.gain_now = self._gain(noise, self.units, base)
        if (len(rounds) - self._batch_decided_at < c.decide_every or noise is None
                or not noise.known):
            return
        self._batch_decided_at = len(rounds)
        speeds = self.speeds(monitor, engine.live_workers)
        capacity = sum(self.unit_samples / t for t in speeds.values() if t > 0)
        overhead = _overhead_s(rounds[-c.decide_every:])
        if not capacity or overhead is None:
            return
        step = base * self.unit_samples
        # A round takes a step of fit per task at least (engine/cycle.py): one dataset batch
        # per worker is the smallest global batch that reads every step's samples.
        lo, hi = self.num_workers * step, c.max_batches * self.num_workers * step
        target = min(max(round(optimal_batch(capacity, overhead, noise.noise_scale) / step)
                         * step, lo), hi)
        now = self.units * self.unit_samples
        if target == now:
            return

        def goodput(m):
            return m / (m / capacity + overhead) * noise.efficiency(m, step)

        if goodput(target) < (1 + c.min_gain) * goodput(now):
            return
        self.set_units(int(round(target / self.unit_samples)), base)
        self.gain_now = self._gain(noise, self.units, base)
        self._record(engine, monitor, (
            f"global batch {int(target)} samples (goodput {goodput(target):.0f} vs "
            f"{goodput(now):.0f} samples/s at {int(now)}: capacity {capacity:.0f} samples/s, "
            f"round cost {1e3 * overhead:.0f} ms, noise scale {noise.noise_scale:.0f} "
            f"samples), step {self.gain_now:.2f}x the one-batch rate"))

    def _gain(self, noise, units, base) -> float:
        if self.config.gain == "linear":
            r = units / base
        else:
            r = 1.0 if noise is None else noise.gain(units * self.unit_samples,
                                                      base * self.unit_samples)
        # The correction comes in over ramp x (1 + tau) sized rounds (as the linear rule's
        # warm-up, Goyal et al. 2017): a rate at asynchronous SGD's limit on few workers
        # takes it at once; the same rate on many workers (1 + tau large) was not tuned for
        # their staleness, and the gradient noise rises as training settles (docs/AUTO.md).
        span = self.config.ramp * self.correction
        done = 1.0 if span <= 1 else min(1.0, (self._ramped + 1) / span)
        r *= 1.0 + (self.correction - 1.0) * done
        # At most max_step times the linear rule's step (units / base batches): the
        # correction assumes the one-batch rate was at asynchronous SGD's limit; the cap
        # holds a rate that was not (the same rate on 64 workers) to what rounds were
        # measured to take (docs/AUTO.md, section 2).
        r = min(r, self.config.max_step * units / base)
        # Under the edge of stability the rounds measured (StepCeiling: a step whose
        # gradients exploded, halved); inf until then.
        return r if self.ceiling is None else min(r, self.ceiling.ceiling)

    def _check_stability(self, engine, monitor, rounds) -> None:
        """Hands the sized rounds applied since the last call to the step's ceiling; a
        back-off is a decision (its line says why)."""
        if self.ceiling is None:
            return
        for rnd in rounds[self._checked:]:
            norm, step = rnd.info.get("grad_norm"), rnd.info.get("scale")
            if norm is None or not step:
                continue
            # The apply reports the norm of the scaled mean gradient (the update): divided
            # by the scale, a larger step is not taken for a growing gradient.
            loss = getattr(rnd.info.get("gradient"), "loss", math.nan)
            why = self.ceiling.observe(float(norm) / float(step), float(step), float(loss))
            if why is not None:
                _, largest, ceiling = self.ceiling.backoffs[-1]
                # 0: the momentum restarted (velocity()); else scaled with the step
                self._velocity = min(self._velocity,
                                     0.0 if self.config.restart else ceiling / largest)
                self.gain_now = min(self.gain_now, self.ceiling.ceiling)
                self._record(engine, monitor, (
                    f"step at most {self.ceiling.ceiling:.2f}x the one-batch rate from now "
                    f"on: {why}"))
        self._checked = len(rounds)

    def _change(self, engine, monitor, mode: str, why: str) -> None:
        if mode == "rounds":
            why += self._correct(monitor)
        self.mode = mode
        # the next choice counts from here
        self._batch_decided_at = len(self._sized_rounds(monitor))
        self.gain_now = (self._gain(getattr(monitor, "noise", None), self.units,
                                    self.step_units) if mode == "rounds" else 1.0)
        self._record(engine, monitor, why)

    def _correct(self, monitor) -> str:
        """Sets :attr:`correction` from the asynchronous steps' staleness (measured, else
        ``N - 1``); returns what to add to the decision's line."""
        kind = self.config.async_tuned
        self._ramp_start = len(self._sized_rounds(monitor))
        self._ramped = 0
        if kind == "none":
            return ""
        tau = _async_staleness(getattr(monitor, "tasks", []), 4 * self.num_workers)
        source = "measured on the asynchronous steps"
        if tau is None:
            tau, source = self.num_workers - 1.0, f"N - 1 for {self.num_workers} workers"
        self.correction = (1.0 + tau) if kind == "linear" else math.sqrt(1.0 + tau)
        formula = "1 + staleness" if kind == "linear" else "sqrt(1 + staleness)"
        span = max(1, math.ceil(self.config.ramp * self.correction))
        return (f"; the one-batch rate was set for stale steps: rounds step up to "
                f"{self.correction:.2f}x the batch's gain ({formula}, staleness {tau:.2f}: "
                f"{source}), reached over {span} rounds, at most "
                f"{self.config.max_step:g}x the linear rule")

    def _sized_rounds(self, monitor) -> list:
        """The monitor's training rounds split across several workers (sized rounds): the
        new records scanned only (the monitor appends; a new monitor starts over)."""
        rounds = getattr(monitor, "rounds", [])
        seen_by, scanned, sized = self._sized
        if seen_by is not monitor:  # a new monitor (a new fit): its rounds from the start
            scanned, sized, self._checked = 0, [], 0
        n = len(rounds)  # a round recorded meanwhile is scanned next time
        sized.extend(r for r in rounds[scanned:n] if r.training
                     and r.info.get("sizes") and len(r.info["sizes"]) > 1)
        self._sized = (monitor, n, sized)
        return sized

    def _record(self, engine, monitor, why: str) -> None:
        self.decisions.append((engine.version, self.mode, self.global_batch, self.gain_now,
                               why))
        self.lines.append(why)
        if self.say is not None:
            self.say(why)
        if hasattr(monitor, "on_event"):
            monitor.on_event("auto_decision", mode=self.mode, global_batch=self.global_batch,
                             gain=self.gain_now, why=why)

    def __repr__(self):
        return f"AutoController({self.config!r})"


def _projected(rnd, t) -> float | None:
    """``t``'s projected task time in its round ``rnd`` (``None``: not planned for)."""
    return rnd.task_s.get(t.worker if t.worker is not None else t.pinned)


def _holds(t, rnd, now: float, cutoff: float) -> bool:
    """Does ``t``, not done, hold ``rnd`` open at ``now``: not started, not projected, or not
    yet ``cutoff`` times its projected time late (a done task holds nothing)?"""
    if t.state == "done":
        return False
    projected = _projected(rnd, t)
    return (t.state != "running" or projected is None or not projected > 0
            or now - t.t_start < cutoff * projected)


def _async_staleness(tasks, last: int) -> float | None:
    """Mean staleness of the last ``last`` applied asynchronous steps (tasks of no round),
    or ``None`` if there were none."""
    stale = [t.staleness for t in tasks[-last:] if t.applied and t.round is None]
    return sum(stale) / len(stale) if stale else None


def _overhead_s(rounds) -> float | None:
    """Median seconds a sized round took beyond its projected compute (``expected_s``: the
    planned makespan), from one round's open to the next's."""
    extra = []
    for a, b in zip(rounds, rounds[1:]):
        expected = a.info.get("expected_s")
        if expected is not None and math.isfinite(expected):
            extra.append(max(b.t_open - a.t_open - expected, 0.0))
    return statistics.median(extra) if extra else None
