"""CASP under real ``model.fit`` on the shared in-process cluster (3 workers, 2 PS): the
shipped agent decides at round boundaries, every task is applied exactly once, and its
decisions reach the monitor and the Keras logs."""

from __future__ import annotations

import pytest

from support import fit

pytestmark = pytest.mark.cluster


def test_a_casp_fit_completes_and_applies_every_task_once(cluster):
    import tf_hetero

    strategy = tf_hetero.CASPStrategy(cluster.resolver, decide_every=3)
    _, history = fit.fit_with_profile(cluster, strategy, "slow=2:4;base_ms=30", steps=36,
                                   callbacks=[tf_hetero.MonitorLogs(strategy)])
    engine = strategy.engine
    fit.assert_every_task_applied_once_or_dropped(engine, 36)
    assert all(t.state == "done" for r in engine.rounds for t in r.tasks)
    assert strategy.decisions  # the agent decided
    assert all(1 <= k <= 4 for _, k, _ in strategy.decisions)
    assert all("group" in r.info for r in engine.rounds)  # community per round
    assert "casp_mean_k" in strategy.monitor.summary()
    assert any("casp_k" in key for key in history.history)  # Keras logs (MonitorLogs)
