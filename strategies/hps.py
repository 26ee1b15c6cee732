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
from tf_hetero.engine import LocalAccumulation
from tf_hetero.strategies.base import EngineConfig, HeteroStrategy, batch_sizes, num_workers
from tf_hetero.strategies.runtime import quantize as quantize_module

__all__ = ["HPSStrategy"]


class HPSStrategy(HeteroStrategy):
    """Heterogeneity-aware PS (see the module docstring for each argument)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 global_batch: int | None = None, round_batches: int | None = None,
                 granularity: int = 8,
                 min_samples: int | None = None, memory_budget=None,
                 round_tasks: int | None = None, min_tasks: int = 1,
                 alpha: float = policies.estimate.DEFAULT_ALPHA, pipeline: bool = False,
                 quantize: str = "fp32", stall_timeout_s: float = 600.0):
        workers = num_workers(cluster_resolver, "HPSStrategy")
        if isinstance(memory_budget, (list, tuple)) and len(memory_budget) != workers:
            raise ValueError(f"HPSStrategy(memory_budget={memory_budget!r}): give one budget per "
                             f"worker ({workers}) or a single integer.")
        codec = quantize_module.get(quantize).name  # a clear error for a bad name, before connecting
        if round_tasks is None:
            assign, granule = batch_sizes("HPSStrategy", workers, global_batch, granularity,
                                          min_samples, memory_budget, alpha,
                                          round_batches), granularity
        else:
            if global_batch is not None or round_batches is not None:
                raise ValueError("HPSStrategy: give global_batch or round_batches (per-worker "
                                 "batch sizes) or round_tasks (micro-batch shares), not both.")
            assign, granule = _shares(workers, round_tasks, min_tasks, memory_budget, alpha), None
        mode = "pipelined" if pipeline else "strict"
        # A sized task is its worker's whole share of the round: strict fp32 pushes it
        # straight into the PS accumulators, as BSP does; the per-worker buffer is there for
        # pipelining and for error feedback of lossy codecs (measured: ~15 ms per task).
        direct = granule is not None and not pipeline and codec == "fp32"
        config = EngineConfig(f"hps{'-pipelined' if pipeline else ''}-{codec}",
                              sync=policies.AllTasks(), assign=assign,
                              components=() if direct else (LocalAccumulation(mode),),
                              codec=codec,
                              stall_timeout_s=stall_timeout_s, granule=granule,
                              global_batch=global_batch, round_batches=round_batches)
        super().__init__(cluster_resolver, variable_partitioner, config=config)


def _shares(workers, round_tasks, min_tasks, memory_budget, alpha):
    """The 0.2 mode: ``round_tasks`` one-micro-batch tasks shared in proportion to speed."""
    if not isinstance(round_tasks, int) or round_tasks < workers * min_tasks:
        raise ValueError(
            f"HPSStrategy(round_tasks={round_tasks!r}) with {workers} workers and "
            f"min_tasks={min_tasks}: need an integer >= {workers * min_tasks} (every worker "
            "takes at least min_tasks micro-batches per round).")
    if memory_budget is not None:
        total = (memory_budget * workers if isinstance(memory_budget, int)
                 else sum(memory_budget))
        if isinstance(total, int) and total < round_tasks:
            raise ValueError(
                f"HPSStrategy: the memory budgets add up to {total} micro-batches per round, "
                f"fewer than round_tasks={round_tasks}. Fix: raise memory_budget or lower "
                "round_tasks.")
    return policies.SpeedProportional(round_tasks, min_tasks, memory_budget, alpha)
