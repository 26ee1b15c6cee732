"""AutoStrategy under real ``model.fit`` on the shared in-process cluster: it sizes rounds for
a persistently slow worker and says so, its steps and rounds apply every task once, a
schedule moves on in scale-invariant iterations, an optimizer whose step ignores the
gradient's scale is refused before training, and a dataset batch 8 does not divide is
re-batched into a divisor of it."""

from __future__ import annotations

import numpy as np
import pytest

from support import keras3 as k3, small

pytestmark = pytest.mark.cluster

B = 8


def _fit(strategy, optimizer, steps=24, epochs=2, batch=B, profile="slow=2:4;base_ms=20",
         keras3=False):
    import tf_keras as keras

    import tf_hetero

    with strategy.scope():
        model = k3.model() if keras3 else small.model()
        model.compile(optimizer, k3.loss() if keras3 else small.loss())
    tf_hetero.emulate(model, profile, strategy=strategy)
    data = small.dataset_fn(batch)
    model.fit(data if keras3 else keras.utils.experimental.DatasetCreator(data), epochs=epochs,
              steps_per_epoch=steps, verbose=0)
    return model


def test_a_slow_worker_gets_sized_rounds_and_every_update_is_counted(inprocess_cluster, capsys):
    import tf_keras as keras

    import tf_hetero
    from tf_hetero.engine import lanes
    from tf_hetero.policies.auto import AutoConfig

    strategy = tf_hetero.AutoStrategy(inprocess_cluster.resolver,
                                      settings=AutoConfig(window=4, decide_every=2))
    model = _fit(strategy, keras.optimizers.SGD(0.02, momentum=0.9))
    out = capsys.readouterr().out
    engine, controller = strategy.engine, strategy.controller
    assert "AutoStrategy: this fit runs 48 steps" in out
    assert controller.mode == "rounds"
    assert engine.idle()
    steps = [t for t in strategy.monitor.tasks if t.round is None]
    rounds = [r for r in engine.rounds if r.applied > 0]
    assert int(model.optimizer.iterations.numpy()) == len(rounds) + len(steps) == engine.version
    covered = sum(len(r.tasks) + len(r.absorbed) for r in engine.rounds) + len(steps)
    assert covered == 48  # every step of fit, once
    # The rounds measured the gradient's noise and the step took a gain over the rate: each
    # round's step is at least the one-batch rate times the share of its planned units it
    # applied (a task the cut-off dropped, under load, takes its share of the step along;
    # CI once saw a round's scale under 1, in a fresh-clone run beside the other worker).
    summary = strategy.monitor.summary()
    assert summary["noise_rounds"] > 0 and summary["auto_sized"] == 1.0
    applied = [(r.id, r.info["scale"], lanes.applied_fraction(r, engine.rounds)) for r in rounds]
    assert all(scale >= min(fraction, 1.0) - 1e-9 for _, scale, fraction in applied), (
        applied, controller.decisions)


@pytest.mark.parametrize("flavour", ["tf_keras", "keras3"])
def test_a_schedule_moves_on_by_each_rounds_gain(inprocess_cluster, flavour):
    """The schedule is evaluated at iterations + the rounds' gains beyond one step each (a
    Keras 3 model: a LossScaleOptimizer around SGD with a Keras 3 schedule)."""
    import tf_hetero

    strategy = tf_hetero.AutoStrategy(inprocess_cluster.resolver)
    if flavour == "keras3":
        import keras

        tf_hetero.keras3.enable()
        schedule = keras.optimizers.schedules.PiecewiseConstantDecay([1000], [0.02, 0.002])
        with strategy.scope():  # a Keras 3 optimizer keeps the strategy it was made under
            optimizer = keras.optimizers.LossScaleOptimizer(
                keras.optimizers.SGD(schedule, momentum=0.9))
    else:
        import tf_keras as keras

        schedule = keras.optimizers.schedules.PiecewiseConstantDecay([1000], [0.02, 0.002])
        optimizer = keras.optimizers.SGD(schedule, momentum=0.9)
    model = _fit(strategy, optimizer, steps=12, epochs=1, keras3=flavour == "keras3")
    wrapped = model.optimizer._tf_hetero_schedule  # pylint: disable=protected-access
    extra = float(wrapped.extra.numpy())
    gains = [r.info["scale"] for r in strategy.engine.rounds if r.applied > 0]
    assert extra == pytest.approx(sum(g - 1.0 for g in gains), rel=1e-5)
    assert extra > 0  # the rounds stepped more than one batch's worth
    if flavour == "keras3":  # the schedule the optimizer evaluates is the wrapped one
        assert model.optimizer.inner_optimizer._learning_rate is wrapped  # pylint: disable=protected-access
        assert wrapped.base is schedule


def test_adam_is_refused_before_training_with_the_fix(inprocess_cluster):
    import tf_keras as keras

    import tf_hetero

    strategy = tf_hetero.AutoStrategy(inprocess_cluster.resolver)
    with pytest.raises(ValueError, match=r"^AutoStrategy: the model's optimizer is Adam, .*"
                                         r"Fix: compile with tf_keras.optimizers.SGD"):
        _fit(strategy, keras.optimizers.Adam(1e-3), steps=4, epochs=1)


def test_a_batch_eight_does_not_divide_is_rebatched_into_a_divisor(inprocess_cluster):
    import tf_keras as keras

    import tf_hetero

    strategy = tf_hetero.AutoStrategy(inprocess_cluster.resolver)
    model = _fit(strategy, keras.optimizers.SGD(0.02), steps=6, epochs=1, batch=12)
    assert strategy.granule == 4 and strategy.dataset_batch == 12
    assert np.isfinite(model.evaluate(keras.utils.experimental.DatasetCreator(
        small.dataset_fn(12)), steps=2, verbose=0))


def test_asynchronous_steps_read_one_dataset_batch_unrolled_and_each_applies_itself(
        inprocess_cluster):
    import tf_keras as keras

    import tf_hetero
    from tf_hetero.policies.auto import AutoConfig

    strategy = tf_hetero.AutoStrategy(inprocess_cluster.resolver, settings=AutoConfig(
        start="async", sized_above=100.0, async_below=100.0))  # async throughout
    model = _fit(strategy, keras.optimizers.SGD(0.02, momentum=0.9), steps=12, epochs=1,
                 batch=4 * B, profile="base_ms=5")
    assert strategy.controller.mode == "async" and not strategy.engine.rounds
    steps = strategy.monitor.tasks
    assert len(steps) == 12 and all(t.round is None and t.applied for t in steps)
    assert int(model.optimizer.iterations.numpy()) == 12 == strategy.engine.version
    # The step reads its dataset batch as granules known when traced: one read per granule
    # and a concat, with the batch's static shape (no while loop of tensor arrays per step).
    coordinator = model._cluster_coordinator  # pylint: disable=protected-access
    (entry,) = [e for e in coordinator.tracer.entries.values() if e.step_fn is not None]
    units = 4 * B // strategy.granule
    assert units > 1
    fns = entry.step_fn.of(units)._list_all_concrete_functions()  # pylint: disable=protected-access
    assert fns
    for f in fns:
        ops = [op.type for op in f.graph.get_operations()]
        # (a distributed iterator's read: IteratorGetNextAsOptional, docs/TF_INTERNALS.md)
        assert ops.count("IteratorGetNextAsOptional") == units
        assert not [t for t in ops if "While" in t]
