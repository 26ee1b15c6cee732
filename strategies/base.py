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

import dataclasses

import tensorflow as tf
from tensorflow.python.distribute import parameter_server_strategy_v2 as pssv2

from tf_hetero import policies
from tf_hetero.engine import LocalAccumulation
from tf_hetero.engine.api import ReportsFigures
from tf_hetero.telemetry import Monitor

__all__ = ["HeteroStrategy", "HeteroExtended", "EngineConfig", "num_workers", "batch_sizes"]


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """What the round engine does with the tasks ``model.fit`` schedules.

    ``sync``/``assign``/``gate`` are policies (:mod:`tf_hetero.policies`); ``components``
    are engine mechanisms (:class:`~tf_hetero.engine.LocalAccumulation`,
    :class:`~tf_hetero.engine.TaskTransfer`, :class:`~tf_hetero.engine.LateFolding`).
    Async sync with no gate and no component needs no engine: every task is applied at once
    as stock TF does (:class:`~tf_hetero.strategies.presets.ASPStrategy`).
    """

    name: str
    sync: object = dataclasses.field(default_factory=policies.Async)
    assign: object = dataclasses.field(default_factory=policies.OnePerWorker)
    gate: object = dataclasses.field(default_factory=policies.Unbounded)
    #: Seconds ``join``/``fetch`` may see no task or round finish before they give up with an
    #: error (TF alone would wait up to an hour for a dead worker).
    stall_timeout_s: float = 600.0
    components: tuple = ()
    #: Seconds between engine ticks (deadlines, transfer); 0 disables the ticker.
    tick_s: float = 0.0
    #: Codec of local-accumulation pushes (:mod:`tf_hetero.strategies.runtime.quantize`).
    codec: str = "fp32"
    #: Sized tasks (per-worker batch sizes): samples per work unit. The strategy re-batches
    #: the workers' data into granules of this size and a task of size n reads n of them as
    #: one batch (:mod:`tf_hetero.strategies.runtime.granules`); ``assign`` must size tasks
    #: (``set_units``). ``None``: a task reads one dataset batch per step.
    granule: int | None = None
    #: Sized tasks: samples per round (``None``: ``round_batches`` x the dataset's batch).
    global_batch: int | None = None
    #: Sized tasks: dataset batches per round when ``global_batch`` is not given (``None``:
    #: one per worker, BSP's global batch).
    round_batches: int | None = None

    def __post_init__(self):
        if not (isinstance(self.stall_timeout_s, (int, float)) and self.stall_timeout_s > 0):
            raise ValueError(f"stall_timeout_s={self.stall_timeout_s!r}: need seconds > 0.")
        if self.sync.mode not in ("rounds", "async"):
            raise ValueError(f"sync policy {self.sync!r} has mode {self.sync.mode!r}; "
                             "expected 'rounds' or 'async'.")
        object.__setattr__(self, "components", tuple(self.components))
        if self.granule is not None and not hasattr(self.assign, "set_units"):
            raise ValueError(f"granule={self.granule}: the assignment policy {self.assign!r} "
                             "does not size tasks (it has no set_units).")

    @property
    def uses_engine(self) -> bool:
        return (self.sync.mode == "rounds" or not isinstance(self.gate, policies.Unbounded)
                or bool(self.components))

    @property
    def local(self) -> LocalAccumulation | None:
        """The local-accumulation component (H-PS), if any."""
        return next((c for c in self.components if isinstance(c, LocalAccumulation)), None)

    def summaries(self) -> list:
        """Policies' own monitor figures (``summary(rounds, num_workers)``)."""
        return [p.summary for p in (self.sync, self.assign, self.gate)
                if isinstance(p, ReportsFigures)]


class HeteroExtended(pssv2.ParameterServerStrategyV2Extended):
    """The Extended of :class:`HeteroStrategy` (variable placement hooks live here)."""


class HeteroStrategy(tf.distribute.ParameterServerStrategy):
    """A ParameterServerStrategy driven by tf-hetero's round engine.

    Args:
      cluster_resolver: as for ``tf.distribute.ParameterServerStrategy``.
      variable_partitioner: as for ``tf.distribute.ParameterServerStrategy``.
      config: an :class:`EngineConfig` (the named strategies build one).
    """

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 config: EngineConfig | None = None):
        config = config or EngineConfig("asp")
        if not isinstance(config, EngineConfig):
            raise TypeError(f"config must be an EngineConfig; received {config!r}.")
        num_workers(cluster_resolver, type(self).__name__)  # a clear error before connecting
        super().__init__(cluster_resolver, variable_partitioner)
        original = self._extended
        self._extended = HeteroExtended(self, cluster_resolver, variable_partitioner)
        self._extended._retrace_functions_for_each_device = (  # pylint: disable=protected-access
            original._retrace_functions_for_each_device)  # pylint: disable=protected-access
        self._hetero_config = config
        #: Emulated worker-to-PS link, microseconds per byte per worker (None: none); set by
        #: :func:`tf_hetero.emulate` from a profile's ``link=``, read by pushes (H-PS).
        self.link_us_per_byte = None
        self.dataset_batch = None  # sized tasks: the workers' dataset batch size, once seen
        workers = self._extended._num_workers  # pylint: disable=protected-access
        self.monitor = Monitor(workers)
        for summary in config.summaries():
            self.monitor.add_summary(summary)
        # Install our coordinator before the first scope() so it sees every closure fit
        # schedules (TF caches one coordinator per strategy).
        from tf_hetero.strategies.runtime.coordinator import HeteroCoordinator

        self.coordinator = HeteroCoordinator(self)

    @property
    def config(self) -> EngineConfig:
        return self._hetero_config

    # ----------------------------------------------------- sized tasks' data
    def distribute_datasets_from_function(self, dataset_fn, options=None):
        if self._hetero_config.granule is None:
            return super().distribute_datasets_from_function(dataset_fn, options)

        def granular(input_context):
            return self._granulate(dataset_fn(input_context))

        return super().distribute_datasets_from_function(granular, options)

    def experimental_distribute_dataset(self, dataset, options=None):
        if self._hetero_config.granule is not None:
            dataset = self._granulate(dataset)
        return super().experimental_distribute_dataset(dataset, options)

    def _granulate(self, dataset):
        """The workers' data in granules; fixes the round's global batch in granules."""
        from tf_hetero.strategies.runtime.granules import granulate

        c = self._hetero_config
        dataset, batch = granulate(dataset, c.granule, type(self).__name__)
        workers = self._extended._num_workers  # pylint: disable=protected-access
        global_batch = c.global_batch or (c.round_batches or workers) * batch
        if global_batch % c.granule:
            raise ValueError(f"{type(self).__name__}(global_batch={global_batch}) is not a "
                             f"multiple of granularity={c.granule}.")
        #: The dataset's batch size: emulated device time is per such batch (tf_hetero.emulate).
        self.dataset_batch = batch
        c.assign.set_units(global_batch // c.granule)
        return dataset

    def shutdown(self) -> None:
        """Stops this strategy's coordinator threads (workers, engine ticker): call it when
        the strategy will not train again, e.g. before building the next one in the same
        process. See :func:`tf_hetero.strategies.runtime.coordinator.shutdown`."""
        from tf_hetero.strategies.runtime.coordinator import shutdown

        shutdown(self)

    @property
    def engine(self):
        """The round engine (``None`` when every task is applied at once: ASP)."""
        return self.coordinator.engine

    def __repr__(self):
        c = self._hetero_config
        return (f"{type(self).__name__}(name={c.name!r}, sync={c.sync!r}, assign={c.assign!r}, "
                f"gate={c.gate!r}, components={list(c.components)!r}, "
                f"workers={self.monitor.num_workers})")


def batch_sizes(who: str, workers: int, global_batch, granularity, min_samples=None,
                memory_budget=None, alpha=policies.estimate.DEFAULT_ALPHA, round_batches=None):
    """The :class:`~tf_hetero.policies.BalancedBatches` of a strategy with per-worker batch
    sizes: every setting in samples, checked before connecting (errors name ``who``), then
    converted to granules."""
    g = granularity
    if not isinstance(g, int) or isinstance(g, bool) or g < 1:
        raise ValueError(f"{who}(granularity={g!r}): need samples >= 1 (e.g. 8).")
    if round_batches is not None:
        if global_batch is not None:
            raise ValueError(f"{who}: give global_batch (samples) or round_batches (dataset "
                             "batches per round), not both.")
        if not isinstance(round_batches, int) or isinstance(round_batches, bool) or round_batches < 1:
            raise ValueError(f"{who}(round_batches={round_batches!r}): need an integer >= 1.")
    min_samples = g if min_samples is None else min_samples
    for name, v in (("global_batch", global_batch), ("min_samples", min_samples)):
        if v is not None and (not isinstance(v, int) or v < g or v % g):
            raise ValueError(f"{who}({name}={v!r}): need a multiple of granularity={g}.")
    if global_batch is not None and global_batch < workers * min_samples:
        raise ValueError(f"{who}(global_batch={global_batch}) with {workers} workers: need "
                         f">= {workers * min_samples} (min_samples={min_samples} per worker).")
    budgets = (None if memory_budget is None else
               [memory_budget] * workers if isinstance(memory_budget, int) else list(memory_budget))
    if budgets is not None:
        bad = [b for b in budgets if not isinstance(b, int) or b < min_samples]
        if bad:
            raise ValueError(f"{who}(memory_budget={memory_budget!r}): every budget must "
                             f"be an integer >= min_samples={min_samples} samples per task.")
        if global_batch is not None and sum(b // g for b in budgets) * g < global_batch:
            raise ValueError(f"{who}: the memory budgets hold {sum(budgets)} samples per "
                             f"round, fewer than global_batch={global_batch}. Fix: raise "
                             "memory_budget or lower global_batch.")
        budgets = [b // g for b in budgets]
    return policies.BalancedBatches(None, min_samples // g, budgets, alpha)


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
