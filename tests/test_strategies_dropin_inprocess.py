"""Drop-in behaviour a user of stock ``ParameterServerStrategy`` relies on, under every round
strategy, on the shared in-process cluster (3 workers, 2 PS):

- the TF tutorial's custom training loop: ``schedule(step).fetch()`` and a ``done()`` polling
  loop return (a round used to start only when enough steps were pending, or at ``join()``);
- a ``fit`` that failed leaves the strategy usable for the next ``fit``;
- two models trained one after the other on one strategy leave each other untouched (each
  round's apply used to run every optimizer ever seen on the strategy).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import small

pytestmark = pytest.mark.cluster

N, B = 3, 8
#: Bound on one custom-loop call in these tests: a hang fails the test instead of the suite.
CALL_TIMEOUT_S = 60

STRATEGIES = {
    "bsp": lambda t, r: t.BSPStrategy(r),
    "backup": lambda t, r: t.BackupWorkerStrategy(r, backups=1),
    "ssp": lambda t, r: t.SSPStrategy(r, staleness=1),
    "epsp": lambda t, r: t.EPSPStrategy(r),
    "epspslack": lambda t, r: t.EPSPStrategy(r, sync="slack"),
    "hps": lambda t, r: t.HPSStrategy(r),
    "hpspipe": lambda t, r: t.HPSStrategy(r, pipeline=True),
}
ROUND_STRATEGIES = [s for s in STRATEGIES if s != "ssp"]


@pytest.fixture(scope="module")
def cluster(inprocess_cluster):
    assert inprocess_cluster.num_workers == N
    return inprocess_cluster


def _strategy(name, cluster):
    import tf_hetero

    return STRATEGIES[name](tf_hetero, cluster.resolver)


def _in_thread(fn, timeout=CALL_TIMEOUT_S):
    """Runs ``fn()`` in a daemon thread; fails the test if it has not returned in time."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # pylint: disable=broad-except
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"still blocked after {timeout} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _custom_loop(strategy):
    """The TF parameter-server tutorial's custom training loop, strategy line swapped."""
    import tensorflow as tf
    import tf_keras as keras

    with strategy.scope():
        model = small.model()
        optimizer = keras.optimizers.SGD(0.1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=keras.losses.Reduction.NONE)

    @tf.function
    def step_fn(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.run(replica_fn, args=(next(iterator),))

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(small.dataset_fn(B))

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
    return model, optimizer, coordinator, lambda: coordinator.schedule(step_fn, args=(iterator,))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_custom_loop_fetch_of_one_scheduled_step_returns_and_applies_it(cluster, name):
    strategy = _strategy(name, cluster)
    model, optimizer, coordinator, schedule = _custom_loop(strategy)
    before = [w.copy() for w in model.get_weights()]
    loss = _in_thread(lambda: schedule().fetch())
    assert np.isfinite(loss)
    _in_thread(coordinator.join)
    moved = sum(float(np.abs(a - b).sum()) for a, b in zip(model.get_weights(), before))
    assert moved > 0  # the step's update reached the variables
    assert int(optimizer.iterations.numpy()) >= 1


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_custom_loop_polling_done_sees_its_steps_finish(cluster, name):
    strategy = _strategy(name, cluster)
    model, optimizer, coordinator, schedule = _custom_loop(strategy)
    values = [schedule() for _ in range(N + 1)]  # one more than a BSP round

    def poll():
        while not coordinator.done():
            time.sleep(0.02)

    _in_thread(poll)
    assert len(strategy.monitor.tasks) == N + 1  # every step ran (backup may drop some)
    assert all(np.isfinite(_in_thread(v.fetch)) for v in values)
    assert int(optimizer.iterations.numpy()) >= 1


def _fit(strategy, model_seed=1, labels=3, steps=2 * N, optimizer=None):
    import tf_keras as keras

    with strategy.scope():
        model = small.model(model_seed)
        model.compile(optimizer or keras.optimizers.SGD(0.1, momentum=0.9),
                      small.loss())
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B, labels)), epochs=1,
              steps_per_epoch=steps, verbose=0)
    return model


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_fit_after_a_failed_fit_trains_normally(cluster, name):
    import tensorflow as tf

    strategy = _strategy(name, cluster)
    with pytest.raises(tf.errors.InvalidArgumentError, match="label value"):
        _in_thread(lambda: _fit(strategy, labels=50))
    failed = len(strategy.monitor.tasks)
    model = _in_thread(lambda: _fit(strategy, model_seed=2))
    assert int(model.optimizer.iterations.numpy()) >= 1
    assert sum(t.applied for t in strategy.monitor.tasks[failed:]) >= 1


@pytest.mark.parametrize("name", ROUND_STRATEGIES)
def test_a_second_model_on_the_same_strategy_leaves_the_first_untouched(cluster, name):
    strategy = _strategy(name, cluster)
    first = _fit(strategy, model_seed=1)
    weights = [w.copy() for w in first.get_weights()]
    iterations = int(first.optimizer.iterations.numpy())
    second = _fit(strategy, model_seed=2)
    assert int(second.optimizer.iterations.numpy()) >= 1
    assert int(first.optimizer.iterations.numpy()) == iterations
    for got, want in zip(first.get_weights(), weights):
        np.testing.assert_array_equal(got, want)  # momentum would have moved them


def _settled_thread_count(timeout=15.0):
    """The thread count once it stops falling (stopped worker threads exit asynchronously)."""
    deadline, last = time.monotonic() + timeout, threading.active_count()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = threading.active_count()
        if now == last:
            return now
        last = now
    return last


def test_shutdown_leaves_no_thread_of_a_finished_run(cluster):
    import tensorflow as tf

    from tf_hetero.strategies.runtime.coordinator import shutdown

    def one_run(make):
        strategy = make()
        _fit(strategy)
        shutdown(strategy)

    one_run(lambda: _strategy("bsp", cluster))
    first = _settled_thread_count()
    for make in (lambda: _strategy("epspslack", cluster),  # with its engine ticker
                 lambda: _strategy("hps", cluster),
                 lambda: tf.distribute.ParameterServerStrategy(cluster.resolver)):
        one_run(make)
    assert _settled_thread_count() <= first + 2
