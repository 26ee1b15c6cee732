"""``ParameterServerStrategy`` / ``ParameterServerStrategyV2Extended`` internals
(tensorflow/python/distribute/parameter_server_strategy_v2.py, "pssv2" below)."""

from __future__ import annotations

__all__ = ["num_workers", "num_ps"]


def num_workers(strategy) -> int:
    """Worker tasks the strategy connected to (pssv2 ``_num_workers``, set by
    ``_connect_to_cluster``)."""
    return int(strategy.extended._num_workers)  # pylint: disable=protected-access


def num_ps(strategy) -> int:
    """PS tasks the strategy connected to (pssv2 ``_num_ps``; 0 for a strategy that has
    none, e.g. the default strategy). The public ``strategy.cluster_resolver`` is ``None``
    for an in-process cluster's strategy, so it cannot tell."""
    return int(getattr(strategy.extended, "_num_ps", 0) or 0)  # pylint: disable=protected-access
