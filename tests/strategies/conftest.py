"""Fixtures of the strategy tests that train on the shared in-process cluster."""

from __future__ import annotations

import pytest

from support.fit import N, ROUNDS, random_blocks


@pytest.fixture(scope="module")
def cluster(inprocess_cluster):
    """The shared in-process cluster (tests/conftest.py): 3 workers, 2 PS."""
    assert inprocess_cluster.num_workers == N and inprocess_cluster.num_ps == 2
    return inprocess_cluster


@pytest.fixture(scope="module")
def data():
    """Rows and labels for ROUNDS rounds of N blocks of B rows (seeded)."""
    return random_blocks(ROUNDS)
