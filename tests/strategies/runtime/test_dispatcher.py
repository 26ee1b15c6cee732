"""The round dispatcher (strategies/runtime/dispatcher.py) on the shared in-process cluster."""

from __future__ import annotations

import numpy as np
import pytest

from tf_hetero.strategies import registry

from support import small

pytestmark = pytest.mark.cluster

N, B = 3, 8


@pytest.mark.parametrize("name", ["bsp", "hps"])
def test_the_first_rounds_apply_is_traced_while_that_round_runs(cluster, name):
    """Once a round's worth of tasks of a new step is queued, its apply is traced on a thread
    of its own: the first round's close finds it traced ("ahead") instead of tracing it
    between that close and its apply ("at close", as before; the test fails so without
    :meth:`ClosureDispatcher.task_submitted`). Each task here takes 400 ms of emulated device
    time, so that the round cannot close before the trace has started. The fit is the same:
    every round applied, the weights moved and finite.

    The optimizer (SGD with momentum: a slot per variable) is built before the apply's
    trace (by the step's entry, ``StepTracer._build_optimizers``), so that the trace
    creates no variable and its update is traced once (twice without it)."""
    import tf_keras as keras

    import tf_hetero

    strategy = registry.make(name, cluster.resolver)
    with strategy.scope():
        model = small.model(1)
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9), small.loss())
    before = model.get_weights()
    tf_hetero.emulate(model, "base_ms=400", strategy=strategy)
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B)), epochs=1,
              steps_per_epoch=2 * N, verbose=0)
    traces = [when for when, _ in strategy.coordinator.dispatcher.apply_traces]
    assert traces == ["ahead"], traces
    assert strategy.coordinator.dispatcher.update_traces == [1]
    assert len(model.optimizer.variables) == 1 + len(model.trainable_variables)  # + momenta
    assert int(model.optimizer.iterations.numpy()) == 2  # two rounds of N tasks
    after = model.get_weights()
    assert all(np.isfinite(w).all() for w in after)
    assert any(np.abs(a - b).sum() > 0 for a, b in zip(after, before))
