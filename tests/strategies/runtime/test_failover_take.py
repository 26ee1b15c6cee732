"""Which errors the failover takes (strategies/runtime/failover.py ``Failover.take``): a
closure made after a death was failed over is no echo of it, so its error is not taken (it
would end unreported, and the fit wait for it until ``stall_timeout_s``)."""

from __future__ import annotations

import types

import pytest

from support import LazyModule

tf = LazyModule("tensorflow")

pytestmark = pytest.mark.tensorflow


def _failover(lost):
    from tf_hetero.policies.failover import FailoverConfig
    from tf_hetero.strategies.runtime.failover import Failover

    coordinator = types.SimpleNamespace(strategy=None, engine=None)
    failover = Failover(coordinator, FailoverConfig(every=4))
    failover.copy, failover.lost = object(), list(lost)
    return failover


def _dead(task):
    return tf.errors.UnavailableError(
        None, None, f"failed to connect ... from remote target /job:ps/replica:0/task:{task}")


def test_a_death_already_failed_over_is_not_taken_again():
    failover = _failover(lost=[1])
    assert not failover.take(_dead(1))


def test_a_death_met_while_its_recovery_runs_is_taken_once():
    failover = _failover(lost=[])
    failover._ready.clear()  # pylint: disable=protected-access  # a recovery in progress
    assert failover.take(_dead(0))  # the same death met again: the recovery handles it


def test_a_rejoin_whose_cluster_update_never_ends_fails_within_the_bound(monkeypatch):
    """TF's ``update_server_def`` has no timeout: a restarted task that accepts connections
    and never answers would hold ``join`` for ever. The rejoin's update is bounded by
    ``detect_s`` and ends in the clear error; an update that fails is tried again later."""
    import threading

    from tf_hetero import tfcompat
    from tf_hetero.policies.failover import FailoverConfig
    from tf_hetero.strategies.runtime.errors import ParameterServerError
    from tf_hetero.strategies.runtime.failover import Failover

    release = threading.Event()
    failover = Failover(types.SimpleNamespace(strategy=None, engine=None),
                        FailoverConfig(every=4, detect_s=0.2))
    monkeypatch.setattr(tfcompat.coordinator, "refresh_cluster",
                        lambda coordinator: release.wait(30))
    try:
        with pytest.raises(ParameterServerError, match=r"PS \[1\] listen.*did not end within "
                                                       r"0.2 s.*Fix: restart the cluster"):
            failover._refresh_cluster_bounded([1])  # pylint: disable=protected-access
    finally:
        release.set()

    def refused(coordinator):
        raise tf.errors.UnavailableError(None, None, "connection refused")

    monkeypatch.setattr(tfcompat.coordinator, "refresh_cluster", refused)
    error = failover._refresh_cluster_bounded([1])  # pylint: disable=protected-access
    assert isinstance(error, tf.errors.UnavailableError)
