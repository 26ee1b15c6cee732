"""``HPSStrategy``: heterogeneity-aware PS (H-PS, IEEE Access 2021) on the round engine.

What each part of the paper became here:

1. **Per-worker batch sizes** (:class:`~tf_hetero.policies.BalancedBatches`, the default):
   a round has a global batch (``global_batch`` samples, or ``round_batches`` dataset batches;
   default BSP's, workers x the dataset batch) and
   one task per worker; each worker's task takes a share of it proportional to the worker's
   measured speed, in granules of ``granularity`` samples, re-estimated every round, so all
   workers finish the round together. A task reads its granules as one batch (one closure,
   one forward/backward pass, one push), and the round's update is the size-weighted mean of
   the workers' gradients: exactly one step on the whole global batch, as BSP. Floors and
   ceilings per worker: ``min_samples`` and ``memory_budget`` (samples per task: the worker's
   *status*, as H-PS sizes batches by available memory). LB-BSP (Chen et al.) sizes batches
   the same way at BSP barriers. With ``round_tasks=T`` instead, the 0.2 behaviour: a round
   is T one-micro-batch tasks shared in proportion to speed
   (:class:`~tf_hetero.policies.SpeedProportional`; one closure per micro-batch).
2. **One push per worker per round**: a sized task is its worker's whole share, so it pushes
   once. In strict fp32 mode it writes straight into its PS lane, as BSP's tasks do; with
   pipelining or a lossy codec (and in the ``round_tasks`` mode, where a worker runs several
   micro-batch tasks) a task adds its gradient to a buffer on its own worker
   (:class:`~tf_hetero.engine.LocalAccumulation`,
   :mod:`tf_hetero.strategies.runtime.local_push`) and the buffer is pushed once per round, so
   network traffic per round scales with the workers, not the micro-batches. The round's
   apply runs the user's optimizer once on the size-weighted mean: with ``pipeline=False``
   (strict) exactly one large-batch step.
3. **Pipelining** (``pipeline=True``): each worker pushes the previous round's buffer during
   its first task of the next round, overlapping the transfer with compute; every update
   then uses gradients one round old (staleness 1, recorded by the monitor). Strict mode has
   no staleness. At the end of each ``fit`` epoch a push-only round empties the buffers.
   ``overlap=True`` (sized tasks, strict): the next round opens as soon as a round closes and
   its tasks run while the round's apply runs on the chief
   (:mod:`tf_hetero.strategies.runtime.applier`), hiding the apply; every update then uses
   gradients one round old (staleness 1), with no buffer and no drain round.
4. **Quantization** (``quantize="fp16" | "int8" | "int4"``,
   :mod:`tf_hetero.strategies.runtime.quantize`):
   pushes are encoded on the worker (stochastic rounding, error feedback) and decoded on the
   PS; the monitor's ``bytes_pushed`` counts the encoded payloads.
5. **Emulated network**: with a profile ``link=MB/s`` (:mod:`tf_hetero.emulation.profile`), each push
   waits ``payload bytes / bandwidth`` on its worker before the bytes leave it.

>>> strategy = tf_hetero.HPSStrategy(resolver, quantize="int8")        # doctest: +SKIP
"""

from __future__ import annotations

from tf_hetero import policies
from tf_hetero.strategies import config as configs
from tf_hetero.strategies.base import HeteroStrategy, num_workers
from tf_hetero.strategies.runtime import quantize as quantize_module

__all__ = ["HPSStrategy"]


class HPSStrategy(HeteroStrategy):
    """Heterogeneity-aware PS (see the module docstring for each argument)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 global_batch: int | None = None, round_batches: int | None = None,
                 granularity: int | None = None,
                 min_samples: int | None = None, memory_budget=None,
                 round_tasks: int | None = None, min_tasks: int = 1,
                 alpha: float = policies.estimate.DEFAULT_ALPHA, pipeline: bool = False,
                 overlap: bool = False, quantize: str = "fp32", stall_timeout_s: float = 600.0,
                 placement="round_robin", connect_timeout_s: float | None = None,
                 rebalance=None):
        workers = num_workers(cluster_resolver, "HPSStrategy")
        codec = quantize_module.get(quantize).name  # a clear error for a bad name, before connecting
        config = configs.hps(
            workers, codec=codec, global_batch=global_batch, round_batches=round_batches,
            granularity=granularity, min_samples=min_samples, memory_budget=memory_budget,
            round_tasks=round_tasks, min_tasks=min_tasks, alpha=alpha, pipeline=pipeline,
            overlap=overlap, stall_timeout_s=stall_timeout_s)
        super().__init__(cluster_resolver, variable_partitioner, config=config,
                         placement=placement, connect_timeout_s=connect_timeout_s,
                         rebalance=rebalance)
