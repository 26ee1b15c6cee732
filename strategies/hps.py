"""``HPSStrategy``: heterogeneity-aware PS (H-PS, IEEE Access 2021) on the round engine.

What each part of the paper became here:

1. **Dynamic per-worker batch** (:class:`~tf_hetero.policies.SpeedProportional`): a round is
   ``round_tasks`` micro-batch tasks (the global batch per round, default 4 per worker).
   Before every round each worker's speed is re-estimated from its smoothed task time and
   it gets a share of the tasks proportional to it, so all workers finish the round
   together; each worker gets at least ``min_tasks`` and at most its ``memory_budget``
   (micro-batches per round: the worker's *status*, as H-PS sizes batches by available
   memory). Tasks are pinned to their worker. LB-BSP (Chen et al.) resizes batches the same
   way at BSP barriers.
2. **One push per worker per round** (:class:`~tf_hetero.engine.LocalAccumulation`,
   :mod:`tf_hetero.strategies.runtime.local_push`): a task adds
   its gradient to a buffer on its own worker (per-worker variables); a worker pushes its
   buffer to its PS lane once per round, so network traffic per round scales with the
   workers, not the micro-batches. The round's apply then runs the user's optimizer once on
   the mean of all ``round_tasks`` micro-batch gradients: with ``pipeline=False`` (strict)
   this is exactly one large-batch step.
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
from tf_hetero.strategies.base import EngineConfig, HeteroStrategy, num_workers
from tf_hetero.strategies.runtime import quantize as quantize_module

__all__ = ["HPSStrategy"]


class HPSStrategy(HeteroStrategy):
    """Heterogeneity-aware PS (see the module docstring for each argument)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 round_tasks: int | None = None, min_tasks: int = 1, memory_budget=None,
                 alpha: float = policies.estimate.DEFAULT_ALPHA, pipeline: bool = False,
                 quantize: str = "fp32", stall_timeout_s: float = 600.0):
        workers = num_workers(cluster_resolver, "HPSStrategy")
        round_tasks = default_round_tasks(workers) if round_tasks is None else round_tasks
        if not isinstance(round_tasks, int) or round_tasks < workers * min_tasks:
            raise ValueError(
                f"HPSStrategy(round_tasks={round_tasks!r}) with {workers} workers and "
                f"min_tasks={min_tasks}: need an integer >= {workers * min_tasks} (every worker "
                "takes at least min_tasks micro-batches per round); default 4 per worker.")
        if isinstance(memory_budget, (list, tuple)) and len(memory_budget) != workers:
            raise ValueError(f"HPSStrategy(memory_budget={memory_budget!r}): give one budget per "
                             f"worker ({workers}) or a single integer.")
        if memory_budget is not None:
            total = (memory_budget * workers if isinstance(memory_budget, int)
                     else sum(memory_budget))
            if isinstance(total, int) and total < round_tasks:
                raise ValueError(
                    f"HPSStrategy: the memory budgets add up to {total} micro-batches per round, "
                    f"fewer than round_tasks={round_tasks}. Fix: raise memory_budget or lower "
                    "round_tasks.")
        codec = quantize_module.get(quantize).name  # a clear error for a bad name, before connecting
        assign = policies.SpeedProportional(round_tasks, min_tasks, memory_budget, alpha)
        mode = "pipelined" if pipeline else "strict"
        config = EngineConfig(f"hps{'-pipelined' if pipeline else ''}-{codec}",
                              sync=policies.AllTasks(), assign=assign,
                              components=(LocalAccumulation(mode),), codec=codec,
                              stall_timeout_s=stall_timeout_s)
        super().__init__(cluster_resolver, variable_partitioner, config=config)


def default_round_tasks(workers: int) -> int:
    """Micro-batches per H-PS round by default: 4 per worker, so integer shares can follow
    speed (a 4x slower worker takes 1 where the others take 5)."""
    return 4 * workers
