"""``HeteroStrategy`` and the baseline presets.

``HeteroStrategy`` is a ``tf.distribute.ParameterServerStrategy`` (so tf_keras ``model.fit``,
``BackupAndRestore`` and the legacy optimizers treat it as one) with its own Extended and
coordinator. Its policies decide how the tasks ``model.fit`` schedules become updates:

>>> import tensorflow as tf, tf_keras as keras, tf_hetero        # doctest: +SKIP
>>> strategy = tf_hetero.BSPStrategy(cluster_resolver)           # one round = one task per worker
>>> with strategy.scope():
...     model = tf_hetero.models.mlp(); model.compile(keras.optimizers.SGD(0.1), loss)
>>> model.fit(DatasetCreator(dataset_fn), epochs=2, steps_per_epoch=100,
...           callbacks=[tf_hetero.MonitorLogs(strategy)])

Presets:

- :func:`ASP` -- asynchronous, each task applied at once, as stock TF does.
- :func:`BSPStrategy` -- one task per worker per round; the round waits for all; the round's
  mean gradient is applied once (numerically one step on the concatenated batch).
- :func:`BackupWorkerStrategy` (``backups=b``) -- a round applies the first N-b tasks in and
  drops the rest (Chen et al. 2016, "Revisiting distributed synchronous SGD").
- :func:`SSPStrategy` (``staleness=s``) -- asynchronous, but no worker gets more than ``s``
  tasks ahead of the slowest live worker (Ho et al. 2013).

In the synchronous presets one ``model.fit`` step is one micro-batch; a round of N tasks
applies one update, so ``optimizer.iterations`` counts rounds and the global batch of a round
is N x the dataset's batch size. At the end of an epoch a round may have fewer tasks.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf
from tensorflow.python.distribute import parameter_server_strategy_v2 as pssv2

from tf_hetero import policies
from tf_hetero.monitor import Monitor

__all__ = ["HeteroStrategy", "HeteroExtended", "EngineConfig", "ASP", "BSPStrategy",
           "BackupWorkerStrategy", "SSPStrategy"]


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """What the round engine does with the tasks ``model.fit`` schedules."""

    preset: str
    sync: object = dataclasses.field(default_factory=policies.Async)
    assign: object = dataclasses.field(default_factory=policies.OnePerWorker)
    gate: object = dataclasses.field(default_factory=policies.Unbounded)
    #: Seconds ``join`` may see no task or round finish before it gives up with an error
    #: (TF alone would wait up to an hour for a dead worker).
    stall_timeout_s: float = 600.0
    #: Late-gradient policy (``weight(staleness)``; ``None`` drops late gradients).
    late: object = None
    #: Task-transfer policy (``None``: no transfer).
    transfer: object = None
    #: Accumulator lanes beyond one per worker, written by transferred copies.
    extra_lanes: int = 0
    #: Seconds between engine ticks (deadlines, transfer); 0 disables the ticker.
    tick_s: float = 0.0
    #: Local accumulation on the workers (H-PS): None, "strict" or "pipelined" (see
    #: :mod:`tf_hetero.strategies.local_push`).
    local: str | None = None
    #: Codec of local-accumulation pushes (:mod:`tf_hetero.quantize`).
    codec: str = "fp32"

    def __post_init__(self):
        if not self.stall_timeout_s > 0:
            raise ValueError(f"stall_timeout_s={self.stall_timeout_s!r}: need seconds > 0.")
        if self.sync.mode not in ("rounds", "async"):
            raise ValueError(f"sync policy {self.sync!r} has mode {self.sync.mode!r}; "
                             "expected 'rounds' or 'async'.")


class HeteroExtended(pssv2.ParameterServerStrategyV2Extended):
    """The Extended of :class:`HeteroStrategy` (variable placement hooks live here)."""


class HeteroStrategy(tf.distribute.ParameterServerStrategy):
    """A ParameterServerStrategy driven by tf-hetero's round engine.

    Args:
      cluster_resolver: as for ``tf.distribute.ParameterServerStrategy``.
      variable_partitioner: as for ``tf.distribute.ParameterServerStrategy``.
      config: an :class:`EngineConfig` (the presets build one).
      ewma_alpha: smoothing of the monitor's per-worker task times.
    """

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 config: EngineConfig | None = None, ewma_alpha: float = 0.3):
        config = config or EngineConfig(preset="asp")
        if not isinstance(config, EngineConfig):
            raise TypeError(f"config must be an EngineConfig; received {config!r}.")
        super().__init__(cluster_resolver, variable_partitioner)
        original = self._extended
        self._extended = HeteroExtended(self, cluster_resolver, variable_partitioner)
        self._extended._retrace_functions_for_each_device = (  # pylint: disable=protected-access
            original._retrace_functions_for_each_device)  # pylint: disable=protected-access
        self._hetero_config = config
        num_workers = self._extended._num_workers  # pylint: disable=protected-access
        self.monitor = Monitor(num_workers, ewma_alpha=ewma_alpha)
        # Install our coordinator before the first scope() so it sees every closure fit
        # schedules (TF caches one coordinator per strategy).
        from tf_hetero.strategies.coordinator import HeteroCoordinator

        self.coordinator = HeteroCoordinator(self)

    @property
    def config(self) -> EngineConfig:
        return self._hetero_config

    @property
    def engine(self):
        """The round engine (``None`` for the ASP preset)."""
        return self.coordinator.engine

    def __repr__(self):
        c = self._hetero_config
        return (f"{type(self).__name__}(preset={c.preset!r}, sync={c.sync!r}, "
                f"assign={c.assign!r}, gate={c.gate!r}, workers={self.monitor.num_workers})")


def ASP(cluster_resolver, variable_partitioner=None, **kwargs) -> HeteroStrategy:
    """Asynchronous parallel: every task applied at once (stock TF behaviour, monitored)."""
    return HeteroStrategy(cluster_resolver, variable_partitioner,
                          config=EngineConfig("asp", **_engine_kwargs(kwargs)), **kwargs)


def BSPStrategy(cluster_resolver, variable_partitioner=None, **kwargs) -> HeteroStrategy:
    """Bulk synchronous parallel: one task per worker per round, the round waits for all."""
    return HeteroStrategy(cluster_resolver, variable_partitioner, config=EngineConfig(
        "bsp", policies.AllTasks(), policies.OnePerWorker(), **_engine_kwargs(kwargs)), **kwargs)


def BackupWorkerStrategy(cluster_resolver, variable_partitioner=None, *, backups: int = 1,
                         **kwargs) -> HeteroStrategy:
    """Synchronous with backup workers: apply the first N-``backups`` tasks of each round."""
    num_workers = len(cluster_resolver.cluster_spec().as_dict().get("worker", ()))
    if not isinstance(backups, int) or not 0 <= backups < num_workers:
        raise ValueError(f"BackupWorkerStrategy(backups={backups!r}) with {num_workers} workers: "
                         f"need an integer from 0 to {num_workers - 1}.")
    return HeteroStrategy(cluster_resolver, variable_partitioner, config=EngineConfig(
        f"backup{backups}", policies.FirstK(backups), policies.OnePerIdleWorker(),
        **_engine_kwargs(kwargs)), **kwargs)


def SSPStrategy(cluster_resolver, variable_partitioner=None, *, staleness: int = 3,
                **kwargs) -> HeteroStrategy:
    """Stale synchronous parallel: async, no worker more than ``staleness`` tasks ahead."""
    if not isinstance(staleness, int) or staleness < 0:
        raise ValueError(f"SSPStrategy(staleness={staleness!r}): need an integer >= 0.")
    return HeteroStrategy(cluster_resolver, variable_partitioner, config=EngineConfig(
        f"ssp{staleness}", policies.Async(), policies.OnePerWorker(),
        policies.StalenessBound(staleness), **_engine_kwargs(kwargs)), **kwargs)


def _engine_kwargs(kwargs: dict) -> dict:
    """Moves engine options out of the strategy's keyword arguments."""
    return {k: kwargs.pop(k) for k in ("stall_timeout_s",) if k in kwargs}
