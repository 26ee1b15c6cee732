"""``ParameterServerStrategy`` / ``ParameterServerStrategyV2Extended`` internals
(tensorflow/python/distribute/parameter_server_strategy_v2.py, "pssv2" below)."""

from __future__ import annotations

from tensorflow.python.distribute import parameter_server_strategy_v2 as _pssv2

__all__ = ["Extended", "num_workers", "num_ps", "uses_coordinator", "adopt_extended", "count_variable",
           "variable_partitioner"]


#: The class a strategy's ``extended`` is (pssv2 ~582): subclassed to own variable creation.
Extended = _pssv2.ParameterServerStrategyV2Extended


def _extended(strategy_or_extended):
    """The ``extended`` of a strategy; an ``Extended`` itself is taken as it is."""
    return getattr(strategy_or_extended, "extended", strategy_or_extended)


def num_workers(strategy) -> int:
    """Worker tasks the strategy (or its ``extended``) connected to (pssv2 ``_num_workers``,
    set by ``_connect_to_cluster``)."""
    return int(_extended(strategy)._num_workers)  # pylint: disable=protected-access


def num_ps(strategy) -> int:
    """PS tasks the strategy (or its ``extended``) connected to (pssv2 ``_num_ps``; 0 for a
    strategy that has none, e.g. the default strategy). The public
    ``strategy.cluster_resolver`` is ``None`` for an in-process cluster's strategy."""
    return int(getattr(_extended(strategy), "_num_ps", 0) or 0)  # pylint: disable=protected-access


def uses_coordinator(strategy) -> bool:
    """True for a strategy tf_keras drives through a ``ClusterCoordinator`` (a PS strategy:
    pssv2's ``_should_use_with_coordinator``, read by tf_keras's training.py)."""
    return bool(getattr(strategy, "_should_use_with_coordinator", False))


def adopt_extended(strategy, extended) -> None:
    """Makes ``extended`` (a ``ParameterServerStrategyV2Extended`` subclass built for
    ``strategy``) the strategy's ``extended`` (``_extended``), keeping the original's
    ``_retrace_functions_for_each_device`` (set on it by ``StrategyBase.__init__``,
    distribute_lib ~1181, before the subclass exists)."""
    original = strategy._extended  # pylint: disable=protected-access
    extended._retrace_functions_for_each_device = (  # pylint: disable=protected-access
        original._retrace_functions_for_each_device)  # pylint: disable=protected-access
    strategy._extended = extended  # pylint: disable=protected-access


def count_variable(extended) -> None:
    """One more variable created (``_variable_count``, pssv2 ``_create_variable_round_robin``:
    TF's round-robin takes the next PS from it)."""
    extended._variable_count += 1  # pylint: disable=protected-access


def variable_partitioner(strategy):
    """The ``variable_partitioner`` of a strategy (or its ``extended``:
    ``_variable_partitioner``), or ``None``."""
    return getattr(_extended(strategy), "_variable_partitioner", None)  # pylint: disable=protected-access
