"""Adding a strategy: one policy file (tests/support/toy_policy.py) and one registry line, no
change to the engine. The toy runs under the pure engine and under real ``model.fit``, and its rounds
are large-batch steps like BSP's."""

from __future__ import annotations

import pytest

from tf_hetero.engine import RoundEngine
from tf_hetero.policies import AllTasks

from support import small, toy_policy
from support.fakes import FakeDispatcher

N, B = 3, 8


def _register():
    from tf_hetero.strategies import registry

    def create(resolver, _):
        from tf_hetero.strategies import EngineConfig, HeteroStrategy

        return HeteroStrategy(resolver, config=EngineConfig(
            "toy", AllTasks(), toy_policy.EveryOtherSitsOutOddRounds()))

    registry.register("toy", create, updates=lambda n, arg: n, help="toy", replace=True)
    return registry


def test_toy_policy_drives_the_pure_engine_unchanged():
    d = FakeDispatcher()
    e = RoundEngine(4, AllTasks(), toy_policy.EveryOtherSitsOutOddRounds(), d)
    for _ in range(4 + 2 + 4):
        e.submit(None)
        for t, w, r in list(d.dispatched):
            if t.state == "dispatched":
                e.task_started(t, w)
                e.task_finished(t, w)
        for rid, _ in d.applies:
            if e.rounds[rid].applied < 0:
                e.apply_finished(rid, len(e.rounds[rid].lanes))
    assert [sorted(r.lanes) for r in e.rounds] == [[0, 1, 2, 3], [0, 2], [0, 1, 2, 3]]


@pytest.mark.cluster
def test_a_registered_toy_strategy_trains_under_model_fit(inprocess_cluster):
    import tf_keras as keras

    registry = _register()
    try:
        strategy = registry.make("toy", inprocess_cluster.resolver)
        with strategy.scope():
            model = small.model()
            model.compile(keras.optimizers.SGD(0.1), small.loss())
        model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B)), epochs=1,
                  steps_per_epoch=N + 2 + N, verbose=0)  # rounds of 3, 2 (worker 1 out), 3
        rounds = strategy.engine.rounds
        assert [sorted(r.lanes) for r in rounds] == [[0, 1, 2], [0, 2], [0, 1, 2]]
        assert [r.info["sitting_out"] for r in rounds] == [[], [1], []]
        assert int(model.optimizer.iterations.numpy()) == len(rounds) == 3
        assert registry.updates_per_round("toy", N) == N
    finally:
        registry.unregister("toy")
