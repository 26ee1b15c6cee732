"""Strategy arguments are checked before connecting: impossible settings are refused with a
one-line fix, on a resolver that names workers but reaches no server (TensorFlow imported, no
cluster)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)




class _FakeResolver:
    def __init__(self, num_workers):
        self.num_workers = num_workers

    def cluster_spec(self):
        spec = {"worker": [f"w{i}" for i in range(self.num_workers)], "ps": ["p0"]}

        class Spec:
            def as_dict(self):
                return spec

        return Spec()


@pytest.mark.parametrize("bad", [-1, 3, 4, 1.5, "1", None])
def test_backup_worker_strategy_rejects_backups_outside_zero_to_n_minus_one(bad):
    pytest.importorskip("tensorflow")
    import tf_hetero.strategies as strategies  # imports TensorFlow; starts no cluster

    with pytest.raises(ValueError, match=(r"^BackupWorkerStrategy\(backups=.*\) with 3 workers: "
                                          r"need an integer from 0 to 2\.$")):
        strategies.BackupWorkerStrategy(_FakeResolver(3), backups=bad)


@pytest.mark.parametrize("bad", [-1, 1.5, None])
def test_ssp_strategy_rejects_negative_or_non_integer_staleness(bad):
    pytest.importorskip("tensorflow")
    import tf_hetero.strategies as strategies

    with pytest.raises(ValueError, match=r"^SSPStrategy\(staleness=.*\): need an integer >= 0\.$"):
        strategies.SSPStrategy(_FakeResolver(3), staleness=bad)


def test_strategy_arguments_are_checked_before_connecting():
    pytest.importorskip("tensorflow")
    import tf_hetero.strategies as strategies  # imports TensorFlow; starts no cluster

    with pytest.raises(ValueError, match=r"^quorum=1\.5: need 0 < quorum <= 1\.$"):
        strategies.EPSPStrategy(_FakeResolver(3), quorum=1.5)  # enforced sync too
    with pytest.raises(TypeError, match=r"^BSPStrategy: cluster_resolver is None, not a "
                                        r"cluster resolver\. Fix: pass"):
        strategies.BSPStrategy(None)
