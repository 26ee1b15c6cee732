"""``HeteroStrategy``: a ``tf.distribute.ParameterServerStrategy`` driven by the round engine.

It is a ``ParameterServerStrategy`` (so tf_keras ``model.fit``, ``BackupAndRestore`` and the
legacy optimizers treat it as one) with its own Extended and coordinator. An
:class:`EngineConfig` says what the engine does with the tasks ``model.fit`` schedules: its
policies (:mod:`tf_hetero.policies`) and components (:mod:`tf_hetero.engine`). The named
strategies (:mod:`tf_hetero.strategies.presets`, :mod:`~tf_hetero.strategies.epsp`,
:mod:`~tf_hetero.strategies.hps`) are subclasses that build one:

>>> import tensorflow as tf, tf_keras as keras, tf_hetero        # doctest: +SKIP
>>> strategy = tf_hetero.BSPStrategy(cluster_resolver)           # one round = one task per worker
>>> with strategy.scope():
...     model = tf_hetero.models.mlp(); model.compile(keras.optimizers.SGD(0.1), loss)
>>> model.fit(DatasetCreator(dataset_fn), epochs=2, steps_per_epoch=100,
...           callbacks=[tf_hetero.MonitorLogs(strategy)])
"""

from __future__ import annotations

import weakref

import tensorflow as tf

# The pure part (which policies and components a strategy uses) lives in config.py, shared
# with the simulator; re-exported here, where it always was.
from tf_hetero import hooks, tfcompat
from tf_hetero.cluster.reach import connect_timeout, wait_for_cluster
from tf_hetero.policies.placement import parse_active
from tf_hetero.strategies.config import EngineConfig, batch_sizes
from tf_hetero.strategies.runtime.fitplan import FitState
from tf_hetero.telemetry import Monitor
from tf_hetero.tfcompat import variables as tfvars

__all__ = ["HeteroStrategy", "HeteroExtended", "EngineConfig", "num_workers", "batch_sizes"]


def ps_rates(placement, num_ps: int) -> tuple[float, ...]:
    """The PS tasks' relative service rates for ``placement``: from its ``profile`` (a spec,
    dict or Profile), else from the profile ``tf-hetero run`` exported, else equal."""
    from tf_hetero import env
    from tf_hetero.emulation.profile import Profile

    profile = getattr(placement, "profile", None)
    return Profile.parse(profile if profile is not None else env.profile_spec()
                         ).ps_service_rates(num_ps)


class HeteroExtended(tfcompat.strategy.Extended):
    """The Extended of :class:`HeteroStrategy` (variable placement hooks live here).

    ``placement`` (a :class:`tf_hetero.policies.placement.Placement`) chooses the PS task of every
    variable that is not colocated with another, shards included; ``round_robin`` (the
    default) is TensorFlow's rule. Glue: ``strategies/runtime/placement.py``.
    """

    placement = None

    def set_placement(self, placement, monitor=None) -> None:
        """Uses ``placement`` (a name or a Placement) for the variables created from now on."""
        from tf_hetero.policies.placement import make

        self.placement = make(placement)
        num_ps = tfcompat.strategy.num_ps(self)
        self.placement.bind(num_ps, rates=ps_rates(self.placement, num_ps))
        if getattr(self.placement, "model_fn", None) is not None:  # Balanced(model_fn=...)
            from tf_hetero.strategies.runtime.placement import plan_from_model

            plan_from_model(self.placement, tfcompat.strategy.variable_partitioner(self))
        if monitor is not None:
            monitor.placement = self.placement

    def _create_variable(self, next_creator, **kwargs):
        var = super()._create_variable(next_creator, **kwargs)
        # Every PS variable (model, slots, metrics, accumulators), weakly: a failover
        # copies and restores them all (strategies/runtime/failover.py).
        created = self.__dict__.setdefault("created_variables", [])
        shards = [var] if tfvars.is_ps_variable(var) else getattr(var, "variables", [var])
        for v in shards:  # a ShardedVariable's shards each on their own
            created.append(weakref.ref(v))
        return var

    def ps_variables(self) -> list:
        """The strategy's live PS variables (each shard on its own), in creation order."""
        refs = self.__dict__.get("created_variables", [])
        alive = [r for r in refs if r() is not None]
        refs[:] = alive
        return [v for v in (r() for r in alive) if tfvars.is_ps_variable(v)]

    def _create_variable_round_robin(self, next_creator, **kwargs):
        if self.placement is None:
            return super()._create_variable_round_robin(next_creator, **kwargs)
        from tf_hetero.strategies.runtime.placement import create_variable

        return create_variable(self, self.placement, super()._create_variable_round_robin,
                               next_creator, kwargs)


class HeteroStrategy(tf.distribute.ParameterServerStrategy):
    """A ParameterServerStrategy driven by tf-hetero's round engine.

    Args:
      cluster_resolver: as for ``tf.distribute.ParameterServerStrategy``.
      variable_partitioner: as for ``tf.distribute.ParameterServerStrategy``.
      config: an :class:`EngineConfig` (the named strategies build one).
      connect_timeout_s: seconds to wait for every worker and PS task to answer before
        giving up with an error naming the missing ones (default: the environment variable
        ``TF_HETERO_CONNECT_TIMEOUT_S``, else 300; :func:`tf_hetero.wait_for_cluster`).
      placement: which PS task holds each variable: ``"round_robin"`` (TensorFlow's rule, the
        default), ``"balanced"`` (by bytes and PS service rate) or a
        :class:`tf_hetero.policies.placement.Placement`.
      rebalance: live rebalancing during ``fit`` (round strategies): ``True``, a
        :class:`tf_hetero.policies.rebalance_config.RebalanceConfig`, or a
        :class:`tf_hetero.policies.rebalance.RebalanceController`; at round boundaries
        variables move between PS tasks with their slots and accumulators, a move kept when
        rounds get faster and undone when not (docs/PSLD.md). Every subclass accepts it.
    """

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 config: EngineConfig | None = None, placement="round_robin",
                 connect_timeout_s: float | None = None, rebalance=None):
        config = config or EngineConfig("asp")
        if not isinstance(config, EngineConfig):
            raise TypeError(f"config must be an EngineConfig; received {config!r}.")
        who = type(self).__name__
        num_workers(cluster_resolver, who)  # a clear error before connecting
        # TF's connect waits for ever, silently, for a task that is not up: bound it first.
        wait_for_cluster(cluster_resolver, connect_timeout(connect_timeout_s, who), who)
        super().__init__(cluster_resolver, variable_partitioner)
        # Else each per-worker iterator's per-device stage is autotuned and its deletion (at
        # the end of a fit, or when the context closes) blocks its worker for up to 60 s.
        from tf_hetero.data import device_datasets_without_autotune

        device_datasets_without_autotune()
        tfcompat.strategy.adopt_extended(
            self, HeteroExtended(self, cluster_resolver, variable_partitioner))
        self._hetero_config = config
        #: What a push sent outside a step (H-PS's buffers) waits for: nothing on real
        #: hardware; an emulated link and PS tasks once :func:`tf_hetero.emulate` set its own
        #: (:mod:`tf_hetero.hooks`).
        self.push_hook = hooks.PushHook()
        self.dataset_batch = None  # sized tasks: the workers' dataset batch size, once seen
        self.granule = config.granule  # sized tasks: samples per unit, once the data is seen
        #: What tf-hetero's wraps of tf_keras note on it (runtime/fitplan.py).
        self.fit_state = FitState()
        #: Goes up with every variable moved to another PS (rebalancing, scale_ps): tf_keras
        #: functions made before then are made again (strategies/runtime/rebalance.py).
        self.placement_generation = 0
        workers = tfcompat.strategy.num_workers(self)
        self.monitor = Monitor(workers)
        self._extended.set_placement(placement, self.monitor)
        for summary in config.summaries():
            self.monitor.add_summary(summary)
        # Install our coordinator before the first scope() so it sees every closure fit
        # schedules (TF caches one coordinator per strategy).
        from tf_hetero.strategies.runtime.coordinator import HeteroCoordinator

        self.coordinator = HeteroCoordinator(self)
        self._rebalance_summarized = False
        if rebalance is not None:
            self.set_rebalance(rebalance)

    def set_rebalance(self, rebalance) -> None:
        """Turns live rebalancing on (``True`` or a ``RebalanceController``) or off."""
        from tf_hetero.policies.rebalance import make

        controller = make(rebalance)
        if controller is None:
            self.coordinator.rebalancer = None
            return
        engine = self.coordinator.engine
        if engine is None or not engine.rounds_mode:
            raise ValueError(
                f"{type(self).__name__}(rebalance=True): live rebalancing moves variables at "
                "round boundaries, and this strategy has no rounds (its tasks apply "
                "asynchronously). Fix: use a round strategy (BSP, H-PS, EPSP, backup workers, "
                "grouped sync) or drop rebalance.")
        from tf_hetero.strategies.runtime.rebalance import Rebalancer

        self.coordinator.rebalancer = Rebalancer(self.coordinator, controller)
        if not self._rebalance_summarized:  # once, whatever is replaced
            self._rebalance_summarized = True
            self.monitor.add_summary(lambda rounds, num_workers: (
                self.rebalancer.controller.summary() if self.rebalancer is not None else {}))

    def set_failover(self, failover=True) -> None:
        """PS failover during ``fit`` (round strategies, SSP, DynSGD and ASP; not AutoStrategy;
        experimental, docs/FAILOVER.md): ``True``, an int (applied rounds
        between two copies of the PS variables, default 8), a
        :class:`tf_hetero.policies.failover.FailoverConfig`, or ``None``/``False`` (off).

        The chief keeps a copy of every PS variable every ``every`` applied rounds; when a
        PS task dies, its variables are created again from the copy on a standby PS (one
        in TF_CONFIG left out of :meth:`scale_ps`'s set) or the surviving PS with the least
        load, the model rolls back to the copy, and ``fit`` goes on, saying in one line what
        was lost (docs/FAILOVER.md)::

            strategy = tf_hetero.BSPStrategy(resolver)   # 3 PS tasks in TF_CONFIG
            strategy.scale_ps(2)                         # PS 2 stands by
            strategy.set_failover(8)
        """
        from tf_hetero.policies.failover import make

        config = make(failover)
        if config is None:
            self.coordinator.failover = None
            return
        engine = self.coordinator.engine
        if (engine is not None and not engine.rounds_mode) or self.config.switches_modes:
            raise ValueError(
                f"{type(self).__name__}.set_failover({failover!r}): this strategy switches "
                "between rounds and asynchronous steps, and failover copies the model either "
                "at a round's apply or after an asynchronous step, not across a switch. Fix: "
                "use a round strategy (BSP, H-PS, EPSP, backup workers, grouped sync, CASP, "
                "SSP, DynSGD) or ASP, or drop set_failover (a dead PS then raises "
                "tf_hetero.ParameterServerError; resume with BackupAndRestore).")
        from tf_hetero.strategies.runtime.failover import Failover

        self.coordinator.failover = Failover(self.coordinator, config)

    def scale_ps(self, active) -> None:
        """Elastic PS scaling: only the PS tasks in ``active`` hold variables from now on.

        ``active`` is a count ``n`` (PS tasks 0..n-1) or a list of PS task indices. Before
        the model is built it only chooses where variables are created. During ``fit`` (e.g.
        from a callback) or between fits, the next task waits for a round boundary and moves
        every variable off a PS leaving the set, with its slots and accumulators, and load
        onto a PS joining it; no update is lost or doubled. It needs live rebalancing
        (``rebalance=``) once variables exist. TensorFlow cannot add a task to a running
        cluster: list every PS task you may scale to in TF_CONFIG and keep the extra ones
        standing by (docs/PSLD.md section 5)::

            strategy = tf_hetero.BSPStrategy(resolver, rebalance=True)   # 2 PS in TF_CONFIG
            strategy.scale_ps(1)            # PS 1 stands by: every variable on PS 0
            ...                             # model built, fit running
            strategy.scale_ps(2)            # at the next round boundary, PS 1 takes load
        """
        who = f"{type(self).__name__}.scale_ps"
        placement = self.extended.placement
        active = parse_active(active, placement.num_ps, who)
        rebalancer = self.rebalancer
        if rebalancer is None and placement.placed:
            raise ValueError(
                f"{who}({list(active)}): {len(placement.placed)} variables already exist and "
                "moving them between PS tasks needs live rebalancing. Fix: create the "
                "strategy with rebalance=True (or call set_rebalance(True)) before "
                "scale_ps, or call scale_ps before building the model.")
        placement.set_active(active)  # variables created from now on
        if rebalancer is not None:
            rebalancer.controller.active = active
            rebalancer.scale_to = active  # existing variables: at the next round boundary

    def fit_starts(self, model) -> None:
        """Called when a ``fit`` schedules its first training step (``model``: its model, if
        known): a strategy that cannot train it raises here, before any step runs."""

    def fit_line(self, plan: dict) -> str | None:
        """The line said when a ``fit`` starts under rounds (``plan``: its steps, epochs,
        steps per epoch and per execution): how many updates it makes and the rate rule."""
        from tf_hetero.strategies.runtime.fitplan import plan_line

        engine = self.engine
        return plan_line(type(self).__name__, workers=engine.num_workers,
                         groups=len(engine.groups) or 1, round_steps=engine.round_steps, **plan)

    @property
    def rebalancer(self):
        """The live rebalancer (its ``controller``, ``moves``, ``pauses``), or ``None``."""
        return self.coordinator.rebalancer

    @property
    def config(self) -> EngineConfig:
        return self._hetero_config

    # ----------------------------------------------------- sized tasks' data
    def distribute_datasets_from_function(self, dataset_fn, options=None):
        if self.fit_state.keras_pipeline:  # tf_keras's own, from arrays: not autotuned
            from tf_hetero.data import without_autotune_after

            dataset_fn = without_autotune_after(dataset_fn)
        if self.fit_state.whole_batches:
            return super().distribute_datasets_from_function(dataset_fn, options)
        if self._hetero_config.granule is None:  # a lane's unit is the dataset's batch
            def measured(input_context):
                from tf_hetero.strategies.runtime.granules import dataset_batch

                dataset = dataset_fn(input_context)
                self.monitor.unit_samples = dataset_batch(dataset) or self.monitor.unit_samples
                return dataset

            return super().distribute_datasets_from_function(measured, options)

        def granular(input_context):
            return self._granulate(dataset_fn(input_context))

        return super().distribute_datasets_from_function(granular, options)

    def experimental_distribute_dataset(self, dataset, options=None):
        if self._hetero_config.granule is not None and not self.fit_state.whole_batches:
            dataset = self._granulate(dataset)
        return super().experimental_distribute_dataset(dataset, options)

    def _granulate(self, dataset):
        """The workers' data in granules; fixes the round's global batch in granules."""
        from tf_hetero.strategies.runtime.granules import dataset_batch, granulate

        c = self._hetero_config
        known = dataset_batch(dataset)
        #: Samples per work unit of this strategy's sized tasks (the configured granule, or
        #: a divisor of the dataset's batch: EngineConfig.granule_for).
        self.granule = c.granule_for(known) if known else c.granule
        dataset, batch = granulate(dataset, self.granule, type(self).__name__)
        # A round covers global_batch / batch of fit's steps whoever runs it (the steps
        # beyond its tasks are absorbed): a fit of S steps reads S batches.
        global_batch = c.bind_data(tfcompat.strategy.num_workers(self), batch,
                                   type(self).__name__)
        self.monitor.unit_samples = self.granule  # a lane's units, for the gradient noise
        if self.dataset_batch is not None and self.dataset_batch != batch:
            # Said, not silent: evaluation data made this way would change training's rounds.
            print(f"[tf-hetero] {type(self).__name__}: a dataset of batch {batch} was "
                  f"distributed after one of batch {self.dataset_batch}; rounds now cover "
                  f"{global_batch} samples. If it is evaluation data (a custom loop's), make "
                  "it inside `with strategy.whole_batches():`.", flush=True)
        #: The dataset's batch size: emulated device time is per such batch (tf_hetero.emulate).
        self.dataset_batch = batch
        return dataset

    def whole_batches(self):
        """A context in which the datasets this strategy distributes stay in whole batches
        (sized strategies re-batch the others into granules, and take the rounds' global
        batch from them). ``evaluate``, ``predict`` and ``fit``'s validation use it already;
        a custom loop makes its evaluation data inside it::

            with strategy.whole_batches():
                eval_data = coordinator.create_per_worker_dataset(eval_dataset_fn)
        """
        from tf_hetero.strategies.runtime.granules import whole_batches

        return whole_batches(self)

    def shutdown(self) -> None:
        """Stops this strategy's coordinator threads (workers, engine ticker): call it when
        the strategy will not train again, e.g. before building the next one in the same
        process. See :func:`tf_hetero.strategies.runtime.coordinator.shutdown`."""
        from tf_hetero.strategies.runtime.coordinator import shutdown

        shutdown(self)

    @property
    def groups(self) -> tuple:
        """The current groups of workers with their own rounds (grouped sync: the groups;
        CASP: the communities; one group of all workers otherwise; ``()`` without an
        engine)."""
        engine = self.engine
        return engine.groups if engine is not None else ()

    @property
    def engine(self):
        """The round engine (``None`` when every task is applied at once: ASP)."""
        return self.coordinator.engine

    def __repr__(self):
        c = self._hetero_config
        return (f"{type(self).__name__}(name={c.name!r}, sync={c.sync!r}, assign={c.assign!r}, "
                f"gate={c.gate!r}, components={list(c.components)!r}, "
                f"workers={self.monitor.num_workers})")


def num_workers(cluster_resolver, who: str) -> int:
    """Workers in ``cluster_resolver``'s cluster, or a clear error naming ``who`` and the fix."""
    spec = getattr(cluster_resolver, "cluster_spec", None)
    if not callable(spec):
        raise TypeError(
            f"{who}: cluster_resolver is {cluster_resolver!r}, not a cluster resolver. Fix: "
            "pass tf.distribute.cluster_resolver.TFConfigClusterResolver() (TF_CONFIG set), "
            "tf_hetero.cluster_resolver(), or LocalCluster(...).resolver.")
    workers = len(spec().as_dict().get("worker", ()))
    if workers < 1:
        raise ValueError(f"{who}: the cluster has no \"worker\" job ({spec().as_dict()!r}). "
                         "Fix: list at least one worker in TF_CONFIG's cluster.")
    return workers
