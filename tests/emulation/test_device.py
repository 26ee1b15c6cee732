"""Where an emulated step's own optimizer update lands (tf_hetero/emulation/device.py): after
the step's emulated device time, as on a device whose compute is that time, so an
asynchronous step's staleness counts every update made while it computed. Graph checks, no
cluster: the updates of the model's variable must depend on the emulation's sleep."""

from __future__ import annotations

import types

import pytest

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)

WRITES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")


def _traced_step(optimizer):
    """The graph of one step that minimizes ``sum(v^2)`` with ``optimizer`` inside the
    emulation's trace contexts (a 1 ms device budget)."""
    import tensorflow as tf

    from tf_hetero.emulation import device

    v = tf.Variable([1.0, 2.0])
    model = types.SimpleNamespace(optimizer=optimizer, trainable_variables=[v])
    emulated = types.SimpleNamespace(emulated_link=False, servers=None,
                                     update_us=tf.Variable(tf.constant(0, tf.int64)))

    @tf.function
    def step():
        flags = {"local": False, "pushed": False}
        with device._tracing(tf.timestamp(), tf.constant(1000, tf.int64), [], flags), \
                device._update_after_compute(emulated, model, flags):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(v * v)
            model.optimizer.minimize(loss, [v], tape=tape)
        return loss

    graph = step.get_concrete_function().graph
    handle = next(internal for external, internal in graph.captures if external is v.handle)
    return graph, handle


def _writes_of(graph, handle):
    return [op for op in graph.get_operations() if op.inputs and op.inputs[0] is handle
            and (op.type in WRITES or op.type.startswith("ResourceApply"))]


def _after_sleep(op) -> bool:
    seen, stack = set(), [op]
    while stack:
        op = stack.pop()
        if op.type == "SleepDataset":
            return True
        for parent in [t.op for t in op.inputs] + list(op.control_inputs):
            if parent.name not in seen:
                seen.add(parent.name)
                stack.append(parent)
    return False


@pytest.mark.parametrize("kind", ["sgd_momentum", "adam", "legacy_sgd_momentum"])
def test_an_update_the_step_applies_itself_waits_for_the_emulated_device_time(kind):
    import tf_keras as keras

    optimizer = {"sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
                 "adam": lambda: keras.optimizers.Adam(),
                 "legacy_sgd_momentum": lambda: keras.optimizers.legacy.SGD(0.1, momentum=0.9),
                 }[kind]()
    graph, handle = _traced_step(optimizer)
    writes = _writes_of(graph, handle)
    assert writes and all(_after_sleep(op) for op in writes), [op.type for op in writes]
    assert "apply_gradients" not in vars(optimizer)  # the instance's shadow is gone


def test_an_update_a_round_applies_later_is_not_delayed():
    """A round strategy's step only writes accumulators (its ``apply_gradients`` carries
    ``DEFERS_UPDATE``): the step's closing sleep covers it, nothing is added before."""
    import tf_keras as keras

    from tf_hetero.emulation.device import DEFERS_UPDATE

    class Deferring(keras.optimizers.SGD):
        def apply_gradients(self, grads_and_vars, *args, **kwargs):
            return super().apply_gradients(grads_and_vars, *args, **kwargs)

    setattr(Deferring.apply_gradients, DEFERS_UPDATE, True)
    graph, handle = _traced_step(Deferring(0.1))
    writes = _writes_of(graph, handle)
    assert writes and not any(_after_sleep(op) for op in writes)


@pytest.mark.parametrize("spec", ["ps_mbps=4", "link=10"])
def test_emulating_ps_tasks_or_a_link_needs_a_built_model(spec):
    """Their service is sized from the model's variables: an unbuilt model is refused with
    the fix, before any trace (TF's own error came from inside the first step's trace)."""
    import tf_keras as keras

    import tf_hetero
    from tf_hetero.emulation.profile import ProfileError

    model = keras.Sequential([keras.layers.Dense(3)])
    with pytest.raises(ProfileError, match=r"has none yet. Fix: build the model"):
        tf_hetero.emulate(model, spec, num_workers=2)
