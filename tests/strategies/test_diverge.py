"""A diverging fit stops with one clear line, and the weights keep the last good round
(real ``model.fit`` on the shared in-process cluster)."""

from __future__ import annotations

import numpy as np
import pytest

from support import fit, small

pytestmark = pytest.mark.cluster


def _fit(strategy, lr, steps=60):
    """Linear least squares: past lr ~ 1 / E[x^2] every step multiplies the error."""
    import tf_keras as keras

    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(
            1, input_shape=(small.FEATURES,), kernel_initializer="zeros")])
        model.compile(keras.optimizers.SGD(lr), "mse")
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(8)), epochs=1,
              steps_per_epoch=steps, verbose=0)
    return model


#: Round strategies check each round's mean gradient; ASP (steps that apply on their own)
#: each step's loss. SSP's steps are one-task rounds applied by the chief.
ASYNC = ("asp",)
#: AutoStrategy: the check that stops it may be the loss of one of fit's steps, seen in its
#: sized rounds too ("the loss of step 6 is 1.2e+05"), before a round's gradient norm.
SWITCHES = ("auto",)


def _names():
    from tf_hetero.strategies import registry

    return [n for n in registry.names() if n != "pss"]


@pytest.mark.parametrize("name", _names())
def test_a_diverging_fit_stops_with_one_line_saying_what_to_lower(cluster, name):
    import tf_hetero
    from tf_hetero.strategies import registry

    strategy = registry.make(name, cluster.resolver)
    where = (r"step \d+" if name in ASYNC else r"(round|step) \d+" if name in SWITCHES
             else r"round \d+")
    with pytest.raises(tf_hetero.DivergenceError,
                       match=rf"^tf-hetero: training diverged: .*{where}.*Fix: lower the "
                             r"learning rate \(learning rate 5\)"):
        _fit(strategy, lr=5.0)
    if name not in ASYNC + SWITCHES:
        rounds = [r for r in strategy.engine.rounds if r.applied >= 0]
        assert rounds and "grad_norm" in rounds[-1].info
    # The error reached the user; the same strategy trains again at a sane rate.
    model = _fit(strategy, lr=0.05, steps=6)
    assert all(np.isfinite(w).all() for w in model.get_weights())


def test_a_sane_asynchronous_fit_is_not_stopped_and_every_step_loss_is_checked(cluster):
    """The loss check reads every step (not only those whose result fit still held), and a
    converging fit passes it."""
    import tf_hetero

    strategy = tf_hetero.ASPStrategy(cluster.resolver)
    _fit(strategy, lr=0.05, steps=40)
    assert strategy._cluster_coordinator.losses.steps == 40


@pytest.mark.parametrize("name", ["hps", "asp"])
def test_a_round_task_result_stays_on_its_worker_and_its_round_checks_its_loss(
        cluster, name, monkeypatch):
    """TF copies each closure's result to the chief after running it, while someone holds
    it (the loss check holds every step's). A round's tasks, whose loss their round's apply
    reports, leave theirs on the worker, but for the step scheduled last when it has run:
    the one ``fit`` holds for its logs, copied by its worker's thread as TF would (a worker
    lost between that step and ``join`` would otherwise fail the fit: chaos), and that is
    about all (ASP: every step's, its only loss check)."""
    from tf_hetero.strategies import registry

    copies, held = fit.record_copies_to_chief(monkeypatch)  # held: fit's, at join
    strategy = registry.make(name, cluster.resolver)
    steps = 40
    _fit(strategy, lr=0.05, steps=steps)
    losses = strategy._cluster_coordinator.losses
    if name == "asp":
        assert len(copies) >= steps and losses.steps == steps
    else:
        rounds = [r for r in strategy.engine.rounds if r.applied > 0]
        assert len(copies) <= 2, f"{len(copies)} results of {steps} steps copied to the chief"
        assert losses.steps == len(rounds) >= 2  # each round's loss was checked
        # the result fit holds was copied by its worker's thread, before join
        assert len(held) == 1
        by_worker = [r for r, thread in copies if thread.startswith("WorkerClosure")]
        assert any(r is held[0] for r in by_worker), copies


def _collapsing_fit(strategy, epochs=3, steps=100):
    """A ReLU regression that learns in its first epoch; then its bias is set far below
    zero (every output 0: a dead ReLU, as a too-high rate leaves one), so its loss goes back
    above where it started, stays there and stays finite, and its gradients are 0."""
    import tensorflow as tf
    import tf_keras as keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, small.FEATURES)).astype("float32")
    y = (3.0 + x @ np.full(small.FEATURES, 0.3)).astype("float32")

    def dataset_fn(ctx=None):
        return small.without_autotune(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8))

    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(
            1, activation="relu", input_shape=(small.FEATURES,), kernel_initializer="zeros",
            bias_initializer=keras.initializers.Constant(0.5))])
        model.compile(keras.optimizers.SGD(0.2), "mse")

    class Kill(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                self.model.layers[0].bias.assign([-1e3])

    model.fit(keras.utils.experimental.DatasetCreator(dataset_fn), epochs=epochs,
              steps_per_epoch=steps, verbose=0, callbacks=[Kill()])


@pytest.mark.parametrize("name", ["asp", "bsp", "hps"])
def test_a_collapsed_fit_stops_with_one_line_though_its_loss_stays_finite(cluster, name):
    """A collapse (loss back at its start after it came down) shows in no gradient norm and
    no NaN: the loss check stops it, of every step (ASP) or of every round (the mean loss
    its apply reports: its tasks' results stay on their workers)."""
    import tf_hetero
    from tf_hetero.strategies import registry

    strategy = registry.make(name, cluster.resolver)
    unit = "step" if name in ASYNC else "round"
    with pytest.raises(tf_hetero.DivergenceError,
                       match=rf"^tf-hetero: training diverged: the loss of {unit} \d+ is .*, "
                             r"back above where it started .* training collapsed\. Fix: lower "
                             r"the learning rate"):
        _collapsing_fit(strategy)
    # The same strategy fits again (a new reference loss): two epochs that only learn.
    model = _fit(strategy, lr=0.05, steps=6)
    assert all(np.isfinite(w).all() for w in model.get_weights())
