"""A round profile of a real fit (tf_hetero/telemetry/roundprofile.py): BSP on the shared
in-process cluster (3 workers, 2 PS) under an emulated profile whose worker 2 is 3x slower,
every step's stamps kept on its worker, every apply timed on the chief."""

from __future__ import annotations

import time

import pytest

from support.fit import fit_with_profile

pytestmark = pytest.mark.cluster

PROFILE, BASE_MS, ROUNDS = "slow=2:3;base_ms=20", 20, 10


@pytest.fixture(scope="module")
def profiled(cluster):
    from tf_hetero.strategies import registry

    strategy = registry.make("bsp", cluster.resolver)
    # BSP: one task per worker per round, each of fit's steps one task.
    model, _ = fit_with_profile(cluster, strategy, PROFILE, 3 * ROUNDS, stamps=64)
    return strategy, model._tf_hetero_device


def test_the_phases_of_each_round_add_up_along_the_slow_workers_task(profiled):
    """Every training round but the first (it traces) is profiled along the task that closed
    it: its device phase lasts at least that task's emulated budget, which is the 3x slow
    worker's for at least some rounds (under load a fast worker launched late may close one);
    every phase is a non-negative part of the round, and they add up to the measured rounds.
    With no stamps on the workers or no apply timings, no round would be profiled."""
    from tf_hetero.telemetry import roundprofile

    strategy, device = profiled
    stamps = device.stamps_per_worker()
    assert [len(rows) for rows in stamps] == [ROUNDS] * 3
    applies = list(strategy.coordinator.applier.timings)
    assert len(applies) == ROUNDS
    assert all(submitted <= called <= returned for _, submitted, called, returned in applies)
    profile = roundprofile.round_profile(strategy.engine.rounds, stamps,
                                         time.time() - time.perf_counter(), applies, skip=1)
    assert profile["unmatched"] == 0 and profile["count"] == ROUNDS - 2, profile
    phases = profile["phases"]
    assert all(v >= 0 for v in phases.values()), phases
    assert profile["sum_ms"] == pytest.approx(profile["measured_ms"], rel=1e-9)
    assert BASE_MS < profile["budget_ms"] <= 3 * BASE_MS * 1.001, profile
    assert phases["device"] >= profile["budget_ms"] * 0.999, profile
    assert phases["apply_call"] > 0, phases


def test_without_stamps_nothing_is_profiled(profiled):
    from tf_hetero.telemetry import roundprofile

    strategy, _ = profiled
    profile = roundprofile.round_profile(strategy.engine.rounds, [], 0.0,
                                         list(strategy.coordinator.applier.timings))
    assert profile["count"] == 0 and profile["unmatched"] == ROUNDS - 1
