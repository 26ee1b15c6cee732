"""The contract every registered strategy keeps under real ``model.fit``, for a tf_keras model
and for a Keras 3 one (``tf_hetero.keras3.enable()``; its optimizer a ``LossScaleOptimizer``
around SGD with momentum, mixed precision's), on one in-process cluster (3 workers, a 3x
slower worker so that backup workers drop, EPSP leaves out and transfers, and slack sync
folds):

- every task ``fit`` scheduled is in exactly one round (or applied at once, async), none lost
  or doubled, and each ends applied (done or folded) or dropped: nothing is left running;
- what each apply reported equals what the engine counted for it, and over the fit the
  micro-batches applied equal the tasks applied (a transferred task counts once);
- ``optimizer.iterations`` equals the number of updates applied (rounds, or async tasks);
- the engine is idle when ``fit`` returns;
- the steps ran on the workers, and the weights moved and stayed finite.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from tf_hetero.strategies import registry

from support import keras3 as k3, small

# Grappler on, as in users' fits (the other in-process modules run without it: conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.grappler]

N, B, STEPS = 3, 8, 24
APPLIED = ("done", "folded")
PROFILE = "slow=2:3;base_ms=20"


def _fit(strategy, flavour: str):
    """The fit the contract is checked on; returns the model and its initial weights."""
    import tf_hetero

    if flavour == "keras3":
        import keras

        tf_hetero.keras3.enable()
        with strategy.scope():
            model = k3.model()
            model.compile(keras.optimizers.LossScaleOptimizer(
                keras.optimizers.SGD(0.05, momentum=0.9)), k3.loss())
        data = small.dataset_fn(B)
    else:
        import tf_keras as keras

        with strategy.scope():
            model = small.model()
            model.compile(keras.optimizers.SGD(0.05, momentum=0.9), small.loss())
        data = keras.utils.experimental.DatasetCreator(small.dataset_fn(B))
    before = [w.copy() for w in model.get_weights()]
    tf_hetero.emulate(model, PROFILE, strategy=strategy)
    model.fit(data, epochs=2, steps_per_epoch=STEPS // 2, verbose=0)
    return model, before


@pytest.mark.parametrize("flavour", ["tf_keras", "keras3"])
@pytest.mark.parametrize("name", [n for n in registry.names() if n != "pss"])
def test_every_task_applied_once_or_dropped_and_iterations_count_updates(
        inprocess_cluster, name, flavour):
    strategy = registry.make(name, inprocess_cluster.resolver)
    model, before = _fit(strategy, flavour)
    iterations = int(model.optimizer.iterations.numpy())
    engine = strategy.engine
    monitor = strategy.monitor
    after = model.get_weights()
    assert all(np.isfinite(w).all() for w in after)
    assert any(np.abs(a - b).max() > 0 for a, b in zip(after, before))
    assert {t.worker for t in monitor.tasks} <= set(range(N))  # on the workers
    if engine is None:  # ASP: every task applied at once
        assert len(monitor.tasks) == STEPS and all(t.applied for t in monitor.tasks)
        assert iterations == STEPS
        return
    assert engine.idle()
    # A step a sized round covered without running (its straggler sat out) is absorbed.
    absorbed = [t for r in engine.rounds for t in r.absorbed]
    fit_tasks = [t for r in engine.rounds for t in r.tasks if not t.drain]
    steps = fit_tasks + absorbed
    # A strategy that switches modes (auto) also ran asynchronous steps: each applied itself.
    async_steps = [t for t in monitor.tasks if t.round is None] if engine.rounds else []
    assert len(steps) == len({id(t) for t in steps}) == STEPS - len(async_steps)  # none lost
    assert all(t.applied for t in async_steps)  # or doubled
    assert all(t.state == "absorbed" for t in absorbed)
    copies = [c for r in engine.rounds for c in r.copies]
    assert all(t.state in ("done", "dropped", "folded") for t in fit_tasks + copies)
    for t in fit_tasks:  # a transferred task is applied through one copy at most
        assert sum(c is not None and c.state in APPLIED for c in (t, t.twin)) <= 1
    applied_rounds = [r for r in engine.rounds if r.applied > 0]
    for r in engine.rounds:
        assert r.applied >= 0  # every round was applied or closed empty
        if r.folds:
            assert r.applied > sum(r.lanes.values())
        else:
            assert r.applied == sum(r.lanes.values())
    # Rounds count work units: a sized task (per-worker batch sizes) weighs its size.
    applied_units = sum(c.size for c in fit_tasks + copies if c.state in APPLIED)
    assert sum(r.applied for r in engine.rounds) == applied_units
    assert iterations == len(applied_rounds) + len(async_steps) == engine.version
    states = collections.Counter(str(c.state) for c in fit_tasks + copies)
    assert monitor.summary()["applied_tasks"] == (states["done"] + states["folded"]
                                                  + len(async_steps))
