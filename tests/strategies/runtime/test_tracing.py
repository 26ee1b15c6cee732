"""Step tracing (strategies/runtime/tracing.py) on the shared in-process cluster: a new
model's step is traced once, not twice.

A ``tf.function`` whose first trace creates variables is traced a second time before it can
run (docs/TF_INTERNALS.md, "Where a fit's first second goes"). A round strategy's step makes
its PS accumulators in its first trace, and tf_keras's step (which an asynchronous strategy
runs as written) builds its optimizer's slots in its first ``apply_gradients``."""

from __future__ import annotations

import numpy as np
import pytest

from tf_hetero.strategies import registry

from support import small

pytestmark = pytest.mark.cluster

N, B = 3, 8


@pytest.mark.parametrize("name", ["asp", "bsp"])
def test_a_new_models_step_is_traced_once(cluster, name):
    """ASP: the inspection trace finds the optimizer, which is built before the step's own
    trace (twice without it: the momentum slots made in the first). BSP: the accumulating
    step makes its accumulators aside from the trace (twice without ``_made_aside``). The
    fit trains either way: the updates counted, the weights moved and finite."""
    import tf_keras as keras

    strategy = registry.make(name, cluster.resolver)
    with strategy.scope():
        model = small.model(1)
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9), small.loss())
    before = model.get_weights()
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B)), epochs=1,
              steps_per_epoch=2 * N, verbose=0)
    entries = strategy.coordinator.tracer.entries
    steps = [e.accumulate_fn or fn for fn, e in entries.items() if e.is_train]
    assert len(steps) == 1, entries
    assert steps[0].experimental_get_tracing_count() == 1
    assert int(model.optimizer.iterations.numpy()) == (2 * N if name == "asp" else 2)
    after = model.get_weights()
    assert all(np.isfinite(w).all() for w in after)
    assert any(np.abs(a - b).sum() > 0 for a, b in zip(after, before))


@pytest.mark.parametrize("name", ["asp", "bsp"])
def test_the_steps_optimizer_is_built_on_every_variable_it_is_passed(cluster, name):
    """The optimizer is built as its own first ``apply_gradients`` builds it: on every
    variable the step passes, those without a gradient included (a layer the model does
    not use yet), so a later step that trains that layer finds its slot (stock PSS's
    behaviour; built on the gradients' variables only, the unused kernel and bias would
    have none: under BSP, the round's apply passes only those)."""
    import tf_keras as keras

    class Model(keras.Model):
        def __init__(self):
            super().__init__()
            self.used = keras.layers.Dense(small.CLASSES)
            self.unused = keras.layers.Dense(2)
            self.unused.build((None, 4))

        def call(self, x):
            return self.used(x)

    strategy = registry.make(name, cluster.resolver)
    with strategy.scope():
        model = Model()
        model.build((None, small.FEATURES))
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9), small.loss())
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B)), epochs=1,
              steps_per_epoch=N, verbose=0)
    assert len(model.trainable_variables) == 4
    momenta = len(model.optimizer.variables) - 1  # all but iterations
    assert momenta == 4, [v.name for v in model.optimizer.variables]
