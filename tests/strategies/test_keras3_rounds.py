"""Keras 3 ``model.fit`` under tf-hetero's strategies (issue 50, Stage 2) on the shared
in-process cluster (3 workers, 2 PS), switched on by ``tf_hetero.keras3.enable()``.

The step tracer intercepts Keras 3's ``BaseOptimizer.apply`` as it does tf_keras's
``apply_gradients`` (``strategies/runtime/intercept.py``): without it every round strategy
refuses the step (it would update the variables itself, asynchronously), so each test here
fails with the interception switched off. Stock PSS under Keras 3:
tests/strategies/test_stock_pss_keras3.py.
"""

from __future__ import annotations

import contextlib
import io
import threading

import numpy as np
import pytest

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete
from tf_hetero.strategies import registry

from support import fit, keras3 as k3, wait_until

pytestmark = pytest.mark.cluster

N = 3  # workers of the shared cluster

#: Keras 3 optimizers a BSP round must reproduce exactly (one large-batch step per round).
OPTIMIZERS = {"sgd": lambda keras: keras.optimizers.SGD(0.1),
              "sgd_momentum": lambda keras: keras.optimizers.SGD(0.1, momentum=0.9),
              "adam": lambda keras: keras.optimizers.Adam(0.01),
              # its weight decay acts once per update, in the round's apply
              "adamw": lambda keras: keras.optimizers.AdamW(0.01, weight_decay=0.1),
              # its scale doubles after 2 finite steps: the 3 rounds change it once
              "loss_scale": lambda keras: keras.optimizers.LossScaleOptimizer(
                  keras.optimizers.SGD(0.1, momentum=0.9), dynamic_growth_steps=2)}


@pytest.fixture(scope="module", autouse=True)
def _keras3_on_ps():
    import tf_hetero

    tf_hetero.keras3.enable()


def _worker_blocks(x, y, first=None):
    """A dataset function: worker ``w`` reads its own block of rows ``x[w*B:(w+1)*B]``, again
    and again (``first``: rows read once before, in place of ``x``)."""
    def fn(ctx=None):
        import tensorflow as tf

        w = tf.distribute.coordinator.experimental_get_current_worker_index()

        def block(rows):
            xs = tf.reshape(tf.constant(rows), (N, k3.B, x.shape[1]))
            ys = tf.reshape(tf.constant(y), (N, k3.B))
            return tf.data.Dataset.from_tensors((tf.gather(xs, w), tf.gather(ys, w)))
        data = block(x).repeat()
        return without_autotune(data if first is None else block(first).concatenate(data))
    return fn


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_a_bsp_round_under_keras3_is_one_step_on_the_workers_batches_together(cluster, opt):
    """Each worker its own batch; a BSP round averages their gradients and applies them once
    through the Keras 3 optimizer: the same as one local step on the three batches as one."""
    import keras

    import tf_hetero

    x, y = k3.rows(N * k3.B)
    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = k3.model(1)
        model.compile(OPTIMIZERS[opt](keras), k3.loss())
    reference = k3.model(1)
    reference.compile(OPTIMIZERS[opt](keras), k3.loss())
    rounds = 3
    model.fit(_worker_blocks(x, y), epochs=1, steps_per_epoch=rounds * N, verbose=0)
    for _ in range(rounds):
        reference.train_on_batch(x, y)
    tasks = strategy.monitor.tasks
    assert len(tasks) == rounds * N and {t.worker for t in tasks} == set(range(N))
    assert int(model.optimizer.iterations.numpy()) == rounds  # a round is one update
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _assert_same_optimizer_state(model.optimizer, reference.optimizer)
    assert any(np.abs(w - s).max() > 1e-3  # the reference moved: the check has teeth
               for w, s in zip(reference.get_weights(), k3.model(1).get_weights()))


def test_a_velocity_factor_scales_a_keras3_sgds_momentum_before_the_rounds_update(cluster):
    """An update scale's ``velocity()`` of 0.5 at the third round halves Keras 3 SGD's
    momentum on the PS before that round's update (AutoStrategy's back-off): one group of
    all workers == local large-batch steps with the momentum halved before the third."""
    import dataclasses

    import keras

    from tf_hetero.strategies import HeteroStrategy, config

    x, y = k3.rows(N * k3.B)
    strategy = HeteroStrategy(cluster.resolver, config=dataclasses.replace(
        config.grouped(N, groups=1), update_scale=fit.VelocityAt(3, 0.5)))
    with strategy.scope():
        model = k3.model(1)
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9), k3.loss())
    rounds = 4
    model.fit(_worker_blocks(x, y), epochs=1, steps_per_epoch=rounds * N, verbose=0)
    assert [r.velocity for r in strategy.engine.rounds] == [1.0, 1.0, 0.5, 1.0]
    reference = k3.model(1)
    reference.compile(keras.optimizers.SGD(0.1, momentum=0.9), k3.loss())
    for k in range(rounds):
        if k == 2:
            for m in reference.optimizer.momentums:
                m.assign(0.5 * m)
        reference.train_on_batch(x, y)
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_custom_keras3_train_step_calling_apply_makes_one_update_per_round(cluster):
    """A Keras 3 model whose own ``train_step`` computes its loss with a tape and calls
    ``optimizer.apply`` (not ``apply_gradients``): a BSP round is still one step on the
    workers' batches together, weights and optimizer state."""
    import keras
    import tensorflow as tf

    import tf_hetero

    class OwnStep(keras.Sequential):
        def train_step(self, data):
            x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                loss = k3.loss()(y, self(x, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply(grads, self.trainable_variables)
            return {"loss": loss}

    x, y = k3.rows(N * k3.B, seed=2)
    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = k3.model(1, cls=OwnStep)
        model.compile(OPTIMIZERS["sgd_momentum"](keras))
    reference = k3.model(1, cls=OwnStep)
    reference.compile(OPTIMIZERS["sgd_momentum"](keras))
    rounds = 3
    model.fit(_worker_blocks(x, y), epochs=1, steps_per_epoch=rounds * N, verbose=0)
    for _ in range(rounds):
        reference.train_on_batch(x, y)
    assert int(model.optimizer.iterations.numpy()) == rounds
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _assert_same_optimizer_state(model.optimizer, reference.optimizer)


def _assert_same_optimizer_state(got, want) -> None:
    """Every variable of the optimizer (iterations, slots; a LossScaleOptimizer's scale and
    step counter) as the local reference's."""
    assert len(got.variables) == len(want.variables)  # in the same order (names differ)
    for g, w in zip(got.variables, want.variables):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6,
                                   err_msg=g.path)


def test_a_loss_scale_optimizer_skips_a_round_whose_gradient_is_not_finite(cluster):
    """Keras 3's LossScaleOptimizer under BSP: a round whose mean gradient is not finite
    (worker 0's first batch holds a NaN) makes no update and halves the loss scale, as one
    local step on the three batches together does, and the rounds after it apply. (Given the
    NaN gradient, the rounds' apply without the optimizer's skip zeroes it and stops the fit.)"""
    import keras

    import tf_hetero

    x, y = k3.rows(N * k3.B)
    bad = x.copy()
    bad[0, 0] = np.nan  # worker 0's first batch

    def lso():
        return keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9),
                                                   dynamic_growth_steps=10)
    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = k3.model(1)
        model.compile(lso(), k3.loss())
    reference = k3.model(1)
    reference.compile(lso(), k3.loss())
    rounds = 4
    model.fit(_worker_blocks(x, y, first=bad), epochs=1, steps_per_epoch=rounds * N,
              verbose=0)
    reference.train_on_batch(bad, y)
    for _ in range(rounds - 1):
        reference.train_on_batch(x, y)
    assert [r.applied > 0 for r in strategy.engine.rounds] == [False] + [True] * (rounds - 1)
    assert [e[1] for e in strategy.monitor.events].count("round_skipped") == 1
    assert float(model.optimizer.dynamic_scale.numpy()) == 2.0 ** 14  # 2 ** 15, halved
    assert int(model.optimizer.iterations.numpy()) == rounds - 1
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _assert_same_optimizer_state(model.optimizer, reference.optimizer)


def test_hps_int8_pushes_recover_after_a_skipped_round(cluster):
    """H-PS with int8 pushes and error feedback under a LossScaleOptimizer: after the round
    whose gradient was not finite (skipped), the next pushes are finite again and apply (a
    push's residual keeps no NaN; quantize.compress)."""
    import keras

    import tf_hetero

    x, y = k3.rows(N * k3.B)
    bad = x.copy()
    bad[0, 0] = np.nan
    strategy = tf_hetero.HPSStrategy(cluster.resolver, quantize="int8")
    with strategy.scope():
        model = k3.model(1)
        model.compile(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
                      k3.loss())
    model.fit(_worker_blocks(x, y, first=bad), epochs=1, steps_per_epoch=6 * N, verbose=0)
    applied = [r.applied > 0 for r in strategy.engine.rounds if str(r.kind) == "train"]
    assert not all(applied) and applied[-3:] == [True] * 3, applied
    assert float(model.optimizer.dynamic_scale.numpy()) < 2.0 ** 15
    assert all(np.isfinite(w).all() for w in model.get_weights())


def test_a_keras3_fit_says_how_many_updates_it_makes_and_stops_when_it_diverges(cluster,
                                                                               capsys):
    """The fit-start line, as for tf_keras (the Keras 3 loop notes the fit's plan); each
    round's loss; at a learning rate that diverges, the strategy's divergence stop ends the
    fit with its line."""
    import keras

    import tf_hetero

    data = k3.rows_fn(*k3.rows(64))
    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = k3.compiled(0.1)
    model.fit(data, epochs=2, steps_per_epoch=3 * N, verbose=0)
    out = capsys.readouterr().out
    assert out.count("[tf-hetero] BSPStrategy: this fit runs 18 steps as 18 tasks and "
                     "applies ~6 updates, one per round of 3 tasks") == 1, out
    assert int(model.optimizer.iterations.numpy()) == 6
    # Each round's apply reports its tasks' mean training loss (AutoStrategy's step ceiling
    # reads it), as under tf_keras: Keras 3's step hands it over from `_compute_loss`.
    losses = [r.info["gradient"].loss for r in strategy.engine.rounds if r.applied > 0]
    assert len(losses) == 6 and all(0.1 < x < 10 for x in losses), losses
    # Linear least squares: past lr ~ 1 / E[x^2] every step multiplies the error (as
    # tests/strategies/test_diverge.py does with tf_keras).
    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = keras.Sequential([keras.Input((k3.FEATURES,)),
                                  keras.layers.Dense(1, kernel_initializer="zeros")])
        model.compile(keras.optimizers.SGD(5.0), "mse")
    progress = tf_hetero.Progress(interval_s=0.2, stream=io.StringIO())
    with pytest.raises(tf_hetero.DivergenceError,
                       match=r"^tf-hetero: training diverged: .*round \d+.*Fix: lower the "
                             r"learning rate \(learning rate 5\)"):
        model.fit(data, epochs=1, steps_per_epoch=60, verbose=0, callbacks=[progress])
    # A fit that raises calls no on_train_end: tf_hetero.Progress (a tf_keras callback, which
    # Keras 3's callback list takes) ends its thread once the Keras 3 loop's fit has returned.
    assert wait_until(lambda: not [t for t in threading.enumerate()
                                   if t.name == "tf-hetero-progress"], 5)


@pytest.mark.parametrize("name", ["hps", "epsp"])
def test_a_sized_strategy_evaluates_keras3_models_on_whole_batches(cluster, name):
    """A sized strategy re-batches the data it distributes into granules of 8 rows; evaluation
    data must keep the user's batch (32 rows here), or a step would read a quarter of it."""
    x, y = k3.rows(4 * k3.B, seed=3)
    strategy = registry.make(name, cluster.resolver)
    with strategy.scope():
        model = k3.compiled(0.1, seed=4)
    reference = k3.compiled(0.1, seed=4)
    want = reference.evaluate(x, y, batch_size=len(x), return_dict=True, verbose=0)
    got = model.evaluate(k3.one_batch_fn(x, y), steps=2 * N, return_dict=True, verbose=0)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=1e-6)


@pytest.mark.parametrize("opt", ["sgd_momentum", "adam"])
def test_a_live_move_carries_a_keras3_optimizers_slots_and_loses_nothing(cluster, opt):
    """BSP with live rebalancing: after 2 of 4 rounds the controller moves one kernel off the
    PS holding both; the Keras 3 model, its optimizer's slots and ``iterations`` still equal
    4 large-batch steps, and the kernel's slots moved with it (without the Keras 3 branch of
    ``tfcompat.variables.optimizer_slots`` they stay behind: the next apply reads them from
    the old PS task)."""
    import keras

    import tf_hetero
    from tf_hetero.policies.placement import ps_index
    from tf_hetero.policies.rebalance import RebalanceConfig, RebalanceController
    from tf_hetero.tfcompat.keras3 import tf_variable

    x, y = k3.rows(N * k3.B, seed=5)
    controller = RebalanceController(RebalanceConfig(window=2, explore=0.0, skip_first=0))
    strategy = tf_hetero.BSPStrategy(cluster.resolver, rebalance=controller)
    with strategy.scope():
        model = k3.model(1)
        model.compile(OPTIMIZERS[opt](keras), k3.loss())
    before = [tf_variable(v).device for v in model.trainable_variables]
    rounds = 4
    model.fit(_worker_blocks(x, y), epochs=1, steps_per_epoch=rounds * N, verbose=0)
    (move,) = strategy.rebalancer.moves
    _, _, src, dst, _ = move
    after = [tf_variable(v).device for v in model.trainable_variables]
    (moved,) = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
    assert (ps_index(before[moved]), ps_index(after[moved])) == (src, dst)
    optimizer = model.optimizer
    kinds = ["momentums"] if opt == "sgd_momentum" else ["_momentums", "_velocities"]
    index = optimizer._get_variable_index(model.trainable_variables[moved])
    slots = [getattr(optimizer, kind)[index] for kind in kinds]
    assert [ps_index(tf_variable(s).device) for s in slots] == [dst] * len(kinds)
    reference = k3.model(1)
    reference.compile(OPTIMIZERS[opt](keras), k3.loss())
    for _ in range(rounds):
        reference.train_on_batch(x, y)
    assert int(optimizer.iterations.numpy()) == rounds
    for got, want in zip(model.get_weights() + [v.numpy() for v in optimizer.variables],
                         reference.get_weights()
                         + [v.numpy() for v in reference.optimizer.variables]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_keras3_weights_file_keeps_the_placement_and_a_load_restores_it(cluster, tmp_path):
    """Rebalancing with a saved placement under Keras 3: a BSP fit with live rebalancing moves
    one kernel, and ``save_weights`` writes the placement into the optimizer's entry of the
    ``.weights.h5`` file. Loaded into a fresh model on another rebalancing strategy (round-
    robin: the kernel on its old PS), the next fit's first round moves the kernel back where
    it was saved (a "restore" move) and equals the original model's next round (weights and
    optimizer state). A plain Keras 3 model loads the same file as Keras writes it (the record
    is an attribute, which Keras's loader does not count)."""
    import warnings

    import keras

    import tf_hetero
    from tf_hetero.policies.placement import ps_index
    from tf_hetero.policies.rebalance import RebalanceConfig
    from tf_hetero.tfcompat.keras3 import tf_variable

    def compiled(strategy=None):
        with strategy.scope() if strategy else contextlib.nullcontext():
            m = k3.model(1)
            m.compile(OPTIMIZERS["sgd_momentum"](keras), k3.loss())
            m.optimizer.build(m.trainable_variables)  # Keras 3 loads into a built optimizer
        return m

    def kernels_ps(m):
        return [ps_index(tf_variable(v).device) for v in m.trainable_variables]

    x, y = k3.rows(N * k3.B, seed=5)
    first = tf_hetero.BSPStrategy(cluster.resolver, rebalance=RebalanceConfig(
        window=2, explore=0.0, skip_first=0))
    model = compiled(first)
    start = kernels_ps(model)
    model.fit(_worker_blocks(x, y), epochs=1, steps_per_epoch=4 * N, verbose=0)
    (_, _, src, dst, _), = first.rebalancer.moves
    moved = kernels_ps(model)
    assert moved != start
    path = str(tmp_path / "model.weights.h5")
    model.save_weights(path)
    first.set_rebalance(RebalanceConfig(window=1000))  # no more moves: the rest compares values

    second = tf_hetero.BSPStrategy(cluster.resolver, rebalance=RebalanceConfig(window=1000))
    fresh = compiled(second)
    assert kernels_ps(fresh) == start
    fresh.load_weights(path)
    fresh.fit(_worker_blocks(x, y), epochs=1, steps_per_epoch=N, verbose=0)
    assert [(m[0], m[2], m[3]) for m in second.rebalancer.moves] == [("restore", src, dst)]
    assert kernels_ps(fresh) == moved  # the saved placement, not round-robin
    model.fit(_worker_blocks(x, y), epochs=1, steps_per_epoch=N, verbose=0)
    for got, want in zip(fresh.get_weights() + [v.numpy() for v in fresh.optimizer.variables],
                         model.get_weights() + [v.numpy() for v in model.optimizer.variables]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    plain = compiled()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain.load_weights(path)
    assert not [w for w in caught if "Skipping" in str(w.message)], caught
    assert int(plain.optimizer.iterations.numpy()) == 4


@pytest.mark.parametrize("name", ["pss", "bsp"])
def test_tf_hetero_emulate_gives_keras3_steps_their_profile_device_link_and_ps_time(cluster,
                                                                                      name):
    """``tf_hetero.emulate`` on a Keras 3 model (what ``tf-hetero bench --keras 3`` runs):
    each worker's steps are given the profile's device time plus its link's time for reading
    every variable and pushing every gradient, sized from the Keras variables' ``tf.Variable``
    s; the emulated PS tasks serve those bytes. A step that updates the variables itself
    (stock PSS) waits for its device time before its update and times it; a round's step
    (its update intercepted, applied by the round) does not. Counts, not wall times."""
    import tensorflow as tf

    import tf_hetero
    from tf_hetero.emulation.ps import bytes_per_ps

    strategy = (tf.distribute.ParameterServerStrategy(cluster.resolver) if name == "pss"
                else registry.make(name, cluster.resolver))
    with strategy.scope():
        model = k3.compiled(0.1)
    base_ms, mbps = 20, 2.0
    device = tf_hetero.emulate(model, f"base_ms={base_ms};slow=2:3;link=1000,{mbps},1000;"
                               "ps_mbps=50", strategy=strategy, batch_size=k3.B)
    steps = 3 * N
    model.fit(k3.rows_fn(*k3.rows(64)), epochs=1, steps_per_epoch=steps, verbose=0)
    weights = sum(w.size * 4 for w in model.get_weights())  # every variable trainable, fp32
    links = [2 * weights / (r * 1e6) * 1e3 for r in (1000, mbps, 1000)]  # read + push, ms
    given = device.budget_ms_per_task()
    assert given == pytest.approx([base_ms * f + ms for f, ms in zip((1, 1, 3), links)],
                                  abs=0.01), given
    held = bytes_per_ps(model.variables, 2)
    assert sum(held) == weights and device.servers.read_bytes == held
    assert device.servers.totals()["bytes"] == [steps * 2 * h for h in held]
    try:
        own_updates = [int(v.numpy()) for v in device.update_us.read_all()]
    except AttributeError:  # no step used it: TF makes a per-worker variable's copies then
        own_updates = []
    assert any(own_updates) if name == "pss" else not any(own_updates), own_updates


def test_keras3_callbacks_and_saving_work_under_a_round_strategy(cluster, tmp_path):
    """Issue 50, Stage 3, under BSP: Keras 3's epoch-level callbacks see the rounds' epochs
    (ReduceLROnPlateau lowers the rate the rounds' apply reads, EarlyStopping ends the fit,
    CSVLogger and TensorBoard record the logs with tf-hetero's MonitorLogs keys, ModelCheckpoint
    saves ``.keras`` and ``.weights.h5``), and a model saved after training on the cluster loads
    in a plain process equal to it."""
    import glob

    import keras

    import tf_hetero

    x, y = k3.rows(64, seed=6)
    strategy = tf_hetero.BSPStrategy(cluster.resolver)
    with strategy.scope():
        model = k3.compiled(0.1)
    # After the first epoch (an improvement on infinity) no epoch improves on loss by 100:
    # the rate halves at the end of each, and the fit stops once patience 2 runs out (at the
    # end of epoch 3 of 6).
    callbacks = [tf_hetero.MonitorLogs(strategy),
                 keras.callbacks.ReduceLROnPlateau("loss", factor=0.5, patience=0,
                                                   min_delta=100.0, cooldown=0),
                 keras.callbacks.EarlyStopping("loss", patience=2, min_delta=100.0),
                 keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
                 keras.callbacks.TensorBoard(str(tmp_path / "tb"), write_graph=False),
                 keras.callbacks.ModelCheckpoint(str(tmp_path / "m.keras")),
                 keras.callbacks.ModelCheckpoint(str(tmp_path / "w.weights.h5"),
                                                 save_weights_only=True),
                 tf_hetero.Progress(interval_s=60, stream=io.StringIO())]
    history = model.fit(k3.rows_fn(x, y), epochs=6, steps_per_epoch=2 * N, verbose=0,
                        callbacks=callbacks)
    assert len(history.history["loss"]) == 3  # EarlyStopping
    assert int(model.optimizer.iterations.numpy()) == 3 * 2  # rounds
    assert history.history["learning_rate"] == pytest.approx([0.1, 0.1, 0.05])
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.025)
    rows = (tmp_path / "log.csv").read_text().splitlines()
    assert len(rows) == 4 and "tf_hetero/rounds" in rows[0].split(","), rows[0]
    events = glob.glob(str(tmp_path / "tb" / "train" / "events.out.tfevents.*"))
    assert events and _tensorboard_tags(events[0]) >= {"epoch_loss", "epoch_tf_hetero/rounds"}
    for path in (tmp_path / "m.keras", tmp_path / "w.weights.h5"):
        assert path.exists()
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    model.save(str(tmp_path / "after.keras"))
    after = keras.models.load_model(str(tmp_path / "after.keras"))
    for a, b in zip(after.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(after.predict(x, verbose=0), model(x).numpy(), atol=1e-6)
    # The checkpoint of the last epoch is the trained model too.
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def _tensorboard_tags(path) -> set:
    import tensorflow as tf

    return {v.tag for e in tf.compat.v1.train.summary_iterator(path) for v in e.summary.value}
