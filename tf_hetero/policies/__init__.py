"""Policies of the round engine: small objects with one method each, pure Python, one module
per family, each implementing one Protocol of :mod:`tf_hetero.engine.api`.

- :mod:`~tf_hetero.policies.sync` -- ``should_close(round, now)``: Async, AllTasks, FirstK,
  SlackSync;
- :mod:`~tf_hetero.policies.assign` -- ``plan(RoundContext) -> Plan``: OnePerWorker,
  OnePerIdleWorker, ElasticParallelism, SpeedProportional, BalancedBatches,
  GroupBatches (a group's share of BalancedBatches' global batch);
- :mod:`~tf_hetero.policies.gate` -- ``may_start(worker, clocks)``: Unbounded, StalenessBound;
- :mod:`~tf_hetero.policies.late` -- ``weight(staleness)``: StalenessWeight;
- :mod:`~tf_hetero.policies.transfer` -- ``should_transfer(elapsed, typical)``: TransferAfter;
- :mod:`~tf_hetero.policies.estimate` -- the one task-time estimator (smoothed_time,
  StragglerProjection) and its warm-up rule;
- :mod:`~tf_hetero.policies.group` -- ``groups(ctx)``: FixedGroups, SpeedGroups;
  :mod:`~tf_hetero.policies.community` -- CommunityGroups (CASP: an A3C-trained agent);
- :mod:`~tf_hetero.policies.scale` -- ``scale(group size, workers, staleness, fraction)``:
  GroupScale (grouped sync, DynSGD), SampledScale (EPSP slack);
- :mod:`~tf_hetero.policies.diverge` -- ``check(round, gradient norm)``: DivergenceGuard;
  ``check(step, loss)``: LossGuard (asynchronous strategies).
"""

from tf_hetero.policies.assign import (BalancedBatches, ElasticParallelism, GroupBatches,
                                       OnePerIdleWorker, OnePerWorker, SpeedProportional)
from tf_hetero.policies.diverge import DivergenceError, DivergenceGuard, LossGuard
from tf_hetero.policies.estimate import (Projection, StragglerProjection, smoothed_time, warm)
from tf_hetero.policies.gate import StalenessBound, Unbounded
from tf_hetero.policies.community import CommunityGroups
from tf_hetero.policies.group import FixedGroups, SpeedGroups
from tf_hetero.policies.scale import GroupScale, SampledScale
from tf_hetero.policies.late import StalenessWeight
from tf_hetero.policies.sync import AllTasks, Async, FirstK, SlackSync
from tf_hetero.policies.transfer import TransferAfter

__all__ = ["Async", "AllTasks", "FirstK", "SlackSync", "OnePerWorker", "OnePerIdleWorker",
           "ElasticParallelism", "SpeedProportional", "BalancedBatches", "GroupBatches", "Unbounded", "StalenessBound",
           "StalenessWeight", "TransferAfter", "Projection", "StragglerProjection",
           "smoothed_time", "warm", "DivergenceGuard", "LossGuard", "DivergenceError", "FixedGroups",
           "SpeedGroups", "GroupScale", "SampledScale", "CommunityGroups"]
