"""Cluster performance arithmetic (docs/MEASUREMENT.md). Pure Python.

- *Capacity* of worker i = micro-batch / emulated time of one task on i.
- *Ideal cluster throughput* = sum of capacities.
- *Cluster efficiency* = measured samples/s / ideal.
- BSP with one task per worker per round is bound by its slowest worker:
  efficiency <= N / (s_max * sum_i 1/s_i).

>>> round(bsp_efficiency_bound([1, 1, 1, 4]), 4)
0.3077
>>> ideal_samples_per_sec(32, 100.0, [1, 1, 1, 4])   # 3 * 320 + 80
1040.0
>>> efficiency(520.0, 1040.0)
0.5
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["capacities", "ideal_samples_per_sec", "efficiency", "bsp_efficiency_bound"]


def _check_slowdowns(slowdowns: Sequence[float]) -> None:
    if len(slowdowns) == 0 or not all(math.isfinite(s) and s > 0 for s in slowdowns):
        raise ValueError(f"slowdowns must be a non-empty list of finite numbers > 0; "
                         f"received {list(slowdowns)!r}.")


def capacities(batch_size: int, base_ms: float, slowdowns: Sequence[float]) -> list[float]:
    """Samples/s each worker can process: ``batch_size / (base_ms * s_i / 1000)``."""
    if batch_size <= 0 or base_ms <= 0:
        raise ValueError(f"need batch_size > 0 and base_ms > 0; received {batch_size!r}, {base_ms!r}.")
    _check_slowdowns(slowdowns)
    return [batch_size / (base_ms * s / 1000.0) for s in slowdowns]


def ideal_samples_per_sec(batch_size: int, base_ms: float, slowdowns: Sequence[float]) -> float:
    """Sum of the workers' capacities."""
    return float(sum(capacities(batch_size, base_ms, slowdowns)))


def efficiency(samples_per_sec: float, ideal: float) -> float:
    """Measured throughput as a fraction of the ideal."""
    if ideal <= 0:
        raise ValueError(f"ideal throughput must be > 0; received {ideal!r}.")
    return samples_per_sec / ideal


def bsp_efficiency_bound(slowdowns: Sequence[float]) -> float:
    """Best efficiency of BSP (one task per worker per round): ``N / (s_max * sum 1/s_i)``."""
    _check_slowdowns(slowdowns)
    return len(slowdowns) / (max(slowdowns) * sum(1.0 / s for s in slowdowns))
