"""One simulated ``tf-hetero bench`` row: ``model.fit`` as the bench calls it (the same
epochs, steps and sample budget per row, the same learning-rate rule), driving the real
:class:`~tf_hetero.engine.RoundEngine` with the strategy's own policies and components
(:func:`tf_hetero.strategies.registry.engine_config`) on virtual time, and the figures the
bench reports, computed by the same functions (:mod:`tf_hetero.telemetry.perf`), under the
same JSON keys.

Stock PSS and ASP are not driven by the engine on a real cluster: TF's closure queue hands
each step to the first free worker and the step applies its own gradient. Here they run on
the engine in async mode with no gate, which does the same (an idle worker takes the next
step), with the stock closure cost (``CostModel.stock_s``).

>>> from types import SimpleNamespace as NS
>>> cfg = NS(workers=4, ps=2, profile="slow=3:4", batch_size=32, tasks=40, steps_per_epoch=20,
...          steps_per_execution=1, base_lr=0.02, momentum=0.9, target_accuracy=0.9,
...          eval_interval_s=0.5, seed=0, warmup_updates=0, dataset="digits")
>>> from tf_hetero.sim.costs import CostModel
>>> bsp, pss = (simulate_run(s, cfg, CostModel()) for s in ("bsp", "pss"))
>>> bsp["rounds"], bsp["tasks_per_worker"], pss["tasks_per_worker"]
(10, [10, 10, 10, 10], [12, 12, 12, 4])
>>> bsp["samples_per_sec"] < pss["samples_per_sec"]      # BSP waits for the 4x worker
True
"""

from __future__ import annotations

import math

from tf_hetero.emulation.profile import Profile
from tf_hetero.engine import RoundEngine
from tf_hetero.policies import lr as lr_rule
from tf_hetero.sim.dispatcher import SimDispatcher
from tf_hetero.sim.events import EventLoop, SimulationError
from tf_hetero.telemetry import perf
from tf_hetero.telemetry.monitor import Monitor

__all__ = ["simulate_run", "Simulation", "STOCK", "row_launch"]

#: Registry names whose steps TF's own closure queue runs (no engine on a real cluster).
STOCK = "pss"


class Simulation:
    """One strategy on one simulated cluster: the engine, the dispatcher, the monitor and
    (``learn=True``) the :class:`~tf_hetero.sim.learner.Learner`. :meth:`fit` runs epochs."""

    def __init__(self, spec: str, cfg, costs, *, learn: bool = False, lr_factor: float = 1.0,
                 stop_on_divergence: bool = True, launch: str = "closures"):
        from tf_hetero.strategies import registry

        self.spec, self.cfg, self.costs = spec, cfg, costs
        n, k = cfg.workers, cfg.steps_per_execution
        self.config = config = registry.engine_config(spec, n)
        self.launch = launch
        if launch == "tokens" and (config.sync.mode != "rounds" or config.switches_modes):
            raise ValueError(
                f"{spec}: launch='tokens' hands each round's tasks to long-running closures, "
                f"so it needs a strategy whose steps all run in synchronous rounds; {spec} "
                "runs asynchronous steps" + (" part of the time" if config.switches_modes
                                             else "") + ". Fix: launch='closures' for it.")
        self.profile = Profile.parse(cfg.profile)
        self.profile.check_workers(n)
        self.per_update = registry.updates_per_round(spec, n) * k
        self.granule = config.granule
        if self.granule is not None:  # as HeteroStrategy._granulate: the round in granules
            config.bind_data(n, cfg.batch_size, spec)
        self.steps_per_epoch = cfg.steps_per_epoch  # a step reads one batch, sized or not
        self.epochs = cfg.tasks // cfg.steps_per_epoch
        self.lr = lr_rule.linear_rate(cfg.base_lr, self.per_update, lr_factor)
        self.lr_factor = lr_factor
        self.loop = EventLoop()
        self.monitor = Monitor(n, clock=self.loop)
        for summary in config.summaries():
            self.monitor.add_summary(summary)
        self.learner = None
        if learn:
            from tf_hetero.sim.learner import Learner

            self.learner = Learner(n, cfg.batch_size, self._schedule(), cfg.momentum,
                                   seed=cfg.seed, dataset=getattr(cfg, "dataset", "digits"),
                                   model=getattr(cfg, "model", None),
                                   per_worker=getattr(cfg, "data_per_worker", "shard"))
            self.learner.watch(self.loop, cfg.eval_interval_s)
        self.dispatcher = SimDispatcher(
            self.loop, costs, self.profile, n, cfg.ps, batch_size=cfg.batch_size,
            granule=self.granule, steps_per_execution=k,
            engine_path=config.uses_engine,
            local=config.local is not None, codec=config.codec, learner=self.learner,
            seed=cfg.seed, launch=launch)
        self.engine = RoundEngine(n, config.sync, config.assign, self.dispatcher,
                                  gate=config.gate, monitor=self.monitor, clock=self.loop,
                                  components=config.components,
                                  grouping=getattr(config, "grouping", None),
                                  update_scale=getattr(config, "update_scale", None),
                                  guard=None if stop_on_divergence else _NeverStop())
        self.dispatcher.engine = self.engine
        self.error: BaseException | None = None

    def _schedule(self) -> lr_rule.Rate:
        """The bench's learning rate: the linear rule, warmed up as the bench does."""
        warmup = lr_rule.warmup_updates(getattr(self.cfg, "warmup_updates", 0), self.per_update)
        return lr_rule.warmup_schedule(self.lr, warmup)

    def _stopped(self) -> bool:
        try:
            self.engine.raise_if_error()
        except Exception as e:  # pylint: disable=broad-except
            self.error = e
            return True
        return self.engine.idle()

    def _tick(self) -> None:
        self.engine.tick()
        if not self._stopped():
            self.loop.after(self.config.tick_s, self._tick)

    def fit(self, limit_s: float = 1e7) -> float:
        """Runs ``fit``'s epochs (submit an epoch's steps, join); returns the virtual time
        at which the last one ended. A failed engine (divergence) stops it early."""
        loop, engine = self.loop, self.engine
        start = self.costs.setup_s
        # A strategy whose mode switches keeps its queue short (as the runtime's schedule
        # waits for room): the steps are submitted as the queue empties.
        room = self.config.sync.max_pending if self.config.switches_modes else None
        # An asynchronous step of a sized strategy reads one dataset batch of granules.
        step_size = self.cfg.batch_size // self.granule if self.granule else 1
        for _ in range(self.epochs):
            loop.advance_to(start)
            for step in range(self.steps_per_epoch):
                if room is not None and engine.pending >= room:
                    loop.run(lambda: engine.pending < room or self._stopped(), until=limit_s)
                    if self.error is not None:
                        break
                engine.submit(step, size=step_size)
            engine.flush()
            if self.config.tick_s:
                loop.after(self.config.tick_s, self._tick)
            if not loop.run(self._stopped, until=limit_s):
                raise SimulationError(
                    f"{self.spec}: the simulated cluster stopped with work left at "
                    f"t={loop.now:.3f}s ({len(loop)} events queued, engine idle: "
                    f"{engine.idle()}). This is a simulator bug; please report it.")
            if self.error is not None:
                break
            start = loop.now + self.costs.epoch_s
        return loop.now

    def result(self, end: float) -> dict:
        """The bench's JSON keys for this run (:func:`tf_hetero.tools.benchrow.run_strategy`),
        computed in passes linear in the tasks (a 1000-worker run has a million)."""
        cfg, n, d = self.cfg, self.cfg.workers, self.dispatcher
        records = list(self.monitor.tasks)
        unit = self.granule or cfg.steps_per_execution * cfg.batch_size
        figures = perf.run_figures(records, 0.0, max((r.t_applied for r in self.monitor.rounds),
                                                     default=0.0), unit)
        tasks, sizes = [0] * n, [[] for _ in range(n)]
        for r in records:
            tasks[r.worker] += 1
            sizes[r.worker].append(r.size)
        steps = ({w: [x * self.granule for x in sizes[w]] for w in range(n)} if self.granule
                 else {w: cfg.steps_per_execution * tasks[w] for w in range(n)})
        ideal = perf.ideal_over_tasks(cfg.batch_size, self.profile.base_ms, d.device, steps, n)
        computed = sum(map(sum, sizes)) * unit
        curve, final = [], math.nan
        if self.learner is not None:
            self.learner.sample(end)
            final = self.learner.accuracy()
            curve = self.learner.curve + [(end, final)]
        stock = self.config.name == STOCK
        rounds_mode = self.engine.rounds_mode
        stale = [r.staleness for r in records if r.applied]
        train = [r.t_applied - r.t_open for r in self.monitor.rounds
                 if r.applied > 0 and r.training]
        return {
            "strategy": self.spec,
            "samples_per_sec": figures.samples_per_sec,
            "efficiency": perf.efficiency(figures.samples_per_sec, ideal),
            # Without the set-up and the first steps a short run weighs heavily: what the
            # run's rate tends to over a long fit (docs/SIMULATOR.md, "Sweeps").
            "steady_efficiency": perf.efficiency(
                perf.steady_samples_per_sec(records, figures.span_s, unit), ideal),
            "launch": self.launch,
            "time_to_target_s": perf.time_to_target(curve, cfg.target_accuracy),
            "final_accuracy": final,
            "bytes_to_ps_per_sample": d.bytes_to_ps * self.costs.wire_factor / computed,
            "bytes_from_ps_per_sample": d.bytes_from_ps * self.costs.wire_factor / computed,
            "ps_bytes": None, "ps_load_max_over_mean": None,
            "gradient_bytes_per_sample": d.param_bytes / cfg.batch_size,
            "rounds": (len(records) if stock else len(self.engine.rounds) if rounds_mode
                       else len(stale)),
            "tasks": len(records),
            "applied_tasks": len(stale),
            "dropped_tasks": len(records) - len(stale),
            "fit_wall_s": end,
            "span_s": figures.span_s,
            "setup_s": figures.setup_s,
            "ideal_samples_per_sec": ideal,
            "eval_failures": 0,
            "learning_rate": self.lr,
            "lr_factor": self.lr_factor,
            **({} if stock else {
                "mean_staleness": sum(stale) / len(stale) if stale else 0.0,
                "max_staleness": max(stale, default=0),
                "mean_round_ms": 1e3 * sum(train) / len(train) if rounds_mode and train else None,
                "round_breakdown_ms": (perf.round_breakdown(self.engine.rounds)
                                       if rounds_mode else None)}),
            "tasks_per_worker": tasks,
            "samples_per_worker": [sum(x) * unit for x in sizes],
            "accuracy_curve": curve,
            "timeline": [(r.worker, r.start, r.end, r.applied) for r in records],
            "num_classes": 10,
            "stopped": None if self.error is None else str(self.error),
            "simulated": True,
            **self.monitor.noise.summary(),
            **({"auto_decisions": [{"t_s": t, **{k: info[k] for k in (
                "mode", "global_batch", "gain", "why")}}
                for t, name, info in self.monitor.events if name == "auto_decision"]}
               if self.config.switches_modes else {}),
        }


class _NeverStop:
    """A divergence guard that lets a diverging run go on (sweeps measure its throughput;
    its time to target is then "not reached")."""

    def check(self, round_id, norm):
        return None

    def reset(self):
        pass


def row_launch(spec: str, launch: str) -> str:
    """The launch a simulated bench or sweep row of ``spec`` runs with when the command asks
    for ``launch``: stock PSS, the reference, keeps its closures (it has no rounds to
    launch as tokens); every other row takes ``launch`` (and refuses what it cannot).

    >>> row_launch("pss", "tokens"), row_launch("hps", "tokens")
    ('closures', 'tokens')
    """
    return "closures" if spec == STOCK else launch


def simulate_run(spec: str, cfg, costs, *, learn: bool = False, lr_factor: float = 1.0,
                 stop_on_divergence: bool = True, launch: str = "closures") -> dict:
    """Simulates one bench row of ``spec`` under ``cfg`` (a
    :class:`~tf_hetero.tools.benchconfig.BenchConfig` or any object with its fields) and
    ``costs``; returns the bench's JSON keys. ``stop_on_divergence=False``: the engine's
    divergence guard does not stop the run (its accuracy shows the divergence).
    ``launch="tokens"``: a round strategy's tasks go to long-running closures as tokens
    (:class:`~tf_hetero.sim.dispatcher.SimDispatcher`)."""
    sim = Simulation(spec, cfg, costs, learn=learn, lr_factor=lr_factor,
                     stop_on_divergence=stop_on_divergence, launch=launch)
    return sim.result(sim.fit())
