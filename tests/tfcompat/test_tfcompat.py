"""The adapter's reaches into TensorFlow's and tf_keras's private names still work on the
installed versions: each adapter function is run on real TF objects (no cluster), or, for
names only a connected strategy has, its TF source is checked to still set them. A TF or
tf_keras upgrade that renames or drops one fails here first (docs/TF_INTERNALS.md maps each
function to its test)."""

from __future__ import annotations

import gc
import inspect
import threading
import time
import weakref

import numpy as np
import pytest

from tf_hetero import tfcompat

from support import LazyModule

tf = LazyModule("tensorflow")
keras = LazyModule("tf_keras")
tfc = LazyModule("tf_hetero.tfcompat.coordinator")

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)

# pylint: disable=protected-access


@pytest.fixture
def queue():
    from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

    return tfc.ClosureQueue(cc._CoordinatedClosureQueue())


def _closure():
    fn = tf.function(lambda x: x + 1)
    return tfc.Closure(fn, tfc.ClosureQueue(_raw_queue()).cancellation_manager,
                       args=(tf.constant(1),))


def _raw_queue():
    from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

    return cc._CoordinatedClosureQueue()


# -- tfcompat.coordinator --------------------------------------------------------------------

def test_the_queue_fails_and_clears_as_tf_join_does(queue):
    assert queue.error is None and isinstance(queue.lock, type(threading.Lock()))
    queue.fail(ValueError("first"))
    queue.fail(ValueError("second"))  # the first error stays
    assert str(queue.error) == "first"
    manager = queue.cancellation_manager
    queue.clear_error()  # cancels what is queued: a new cancellation manager
    assert queue.error is None and queue.cancellation_manager is not manager
    queue.fail(ValueError("third"))
    with pytest.raises(ValueError, match="third"):
        queue.raw.wait(timeout=0.1)  # TF raises the queue's error from wait


def test_pinned_closures_are_counted_and_taken_back(queue):
    a, b = _closure(), _closure()
    queue.count_pinned(2)
    queue.raw.put(a, tag=1)
    queue.raw.put(b, tag=1)
    assert queue.raw.inflight_closure_count == 2
    assert queue.take_pinned(1, lambda c: c is a) == [a]
    assert queue.raw.inflight_closure_count == 1
    assert queue.raw.get(tag=1) is b  # the other stays queued for its worker


def test_a_replaced_mark_failed_keeps_only_the_errors_it_is_told_to(queue):
    seen = []
    queue.replace_mark_failed(lambda e: "keep" in str(e), seen.append)
    queue.raw.inflight_closure_count = 2
    queue.raw.mark_failed(RuntimeError("drop"))
    assert queue.error is None and queue.raw.inflight_closure_count == 1
    queue.raw.mark_failed(RuntimeError("keep"))
    assert str(queue.error) == "keep" and queue.raw.inflight_closure_count == 0
    assert [str(e) for e in seen] == ["drop", "keep"]
    with pytest.raises(AssertionError, match="no inflight closures"):
        queue.raw.mark_failed(RuntimeError("none in flight"))


def test_worker_hooks_wrap_the_methods_tf_calls():
    from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

    for name in ("_process_closure", "_on_closure_failure", "_on_worker_recovery",
                 "_process_resource_closure"):
        assert callable(getattr(cc.Worker, name)), name
    calls = []

    class FakeWorker:
        worker_index = 0

        def _process_closure(self, closure):
            calls.append(("tf", closure))

    w = FakeWorker()
    tfc.hook_worker(w, process_closure=lambda tf_fn: lambda c: (calls.append("ours"), tf_fn(c)))
    w._process_closure("c")
    assert calls == ["ours", ("tf", "c")]
    source = inspect.getsource(cc.Worker._process_closure)
    assert "_on_worker_recovery" in source and "_on_closure_failure" in source
    # Read from the module's file: a test fixture may have wrapped a method.
    with open(cc.__file__, encoding="utf-8") as f:
        text = f.read()
    for name in ("self.closure_queue = ", "self.workers = ", "self._cluster = Cluster(",
                 "self._has_initialized = True", "strategy._cluster_coordinator = ",
                 "def stop(self)", "def put_back(self, closure):"):
        assert name in text, name


def test_execute_holding_holds_the_lock_only_while_the_closure_executes():
    from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

    assert "closure.execute_on(self)" in inspect.getsource(cc.Worker._process_resource_closure)
    lock = threading.RLock()
    seen = []

    class FakeClosure:
        def execute_on(self, worker):
            seen.append((worker, lock._is_owned()))

    closure = FakeClosure()
    tfc.execute_holding(closure, lock)
    tfc.execute_holding(closure, lock)  # again (a worker's recovery): wrapped once
    closure.execute_on("w")
    assert seen == [("w", True)] and not lock._is_owned()
    # No reference cycle: TF's dropping the closure frees it (and what it captures) at once,
    # not in a later garbage collection on another thread.
    gone = weakref.ref(closure)
    gc.disable()
    try:
        del closure
        assert gone() is None
    finally:
        gc.enable()


def test_rebuild_resources_reaches_what_tfs_worker_recovery_reaches():
    """``rebuild_resources`` does what ``Worker._on_worker_recovery`` does (its names read
    from TF's source), and finds a per-worker variable's value for a worker."""
    from tensorflow.python.distribute import ps_values
    from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

    recovery = inspect.getsource(cc.Worker._on_worker_recovery)
    for name in ("self._resource_tracking_lock", "self._resource_remote_value_refs",
                 "self._schedule_resource(resource._closure)"):
        assert name in recovery, name
    assert "tag=self.worker_index" in inspect.getsource(cc.Worker._schedule_resource)
    assert issubclass(cc.PerWorkerVariableClosure, cc.ResourceClosure)
    assert "self._per_worker_vars._values[" in inspect.getsource(ps_values.PerWorkerVariable)
    queued = []

    class Closure:
        pass

    class Resource:
        def __init__(self, closure):
            self._closure = closure

    dataset, mine, other = Resource(Closure()), Resource(None), Resource(None)
    mine._closure = cc.PerWorkerVariableClosure.__new__(cc.PerWorkerVariableClosure)
    other._closure = cc.PerWorkerVariableClosure.__new__(cc.PerWorkerVariableClosure)

    class FakeWorker:
        worker_index = 1
        _resource_tracking_lock = threading.Lock()
        _resource_remote_value_refs = [weakref.ref(r) for r in (dataset, mine, other)]

        def _schedule_resource(self, closure):
            queued.append(closure)

    class Values:
        _values = (None, mine)

    class Variable:
        _per_worker_vars = Values()

    assert tfc.rebuild_resources(FakeWorker(), [Variable()]) == 2
    assert queued == [dataset._closure, mine._closure]  # not the other per-worker variable


def test_closures_and_their_remote_values():
    closure = _closure()
    assert not tfc.output_built(closure)
    tfc.set_first_arg(closure, tf.constant(41))
    assert int(closure._args[0]) == 41
    value = closure.build_output_remote_value()
    assert tfc.output_built(closure)
    ready = tfc.remote_value_ready(value)
    assert isinstance(ready, threading.Event) and not ready.is_set()
    assert tfc.fetched_tensors(value) is None
    waited = []
    tfc.wrap_remote_wait(value, lambda original: lambda: (waited.append(1), original())[1])
    tfc.set_remote_value(value, tf.constant(42))
    assert ready.is_set() and int(tfc.remote_values(value)) == 42
    value._wait_and_maybe_error()
    assert waited  # fetch() itself needs a cluster to copy the value to (values.py)
    from tensorflow.python.distribute.coordinator import values

    with open(values.__file__, encoding="utf-8") as f:
        text = f.read()
    assert "self._fetched_tensors = " in text and "self._wait_and_maybe_error()" in text


def test_a_flat_caller_binds_each_argument_pattern_once_and_calls_as_the_stock_call(
        monkeypatch):
    from tensorflow.python.eager.polymorphic_function import function_type_utils

    binds = []
    bind = function_type_utils.canonicalize_function_inputs
    monkeypatch.setattr(function_type_utils, "canonicalize_function_inputs",
                        lambda *a, **k: (binds.append(1), bind(*a, **k))[1])
    # A closure's arguments as a fit step's: a code tensor (a new one per task) and the
    # worker's iterator (the same object at every call).
    iterator = iter(tf.data.Dataset.range(100, 200))
    fn = tf.function(lambda code, it: code * 1000 + next(it))
    manager = tfc.ClosureQueue(_raw_queue()).cancellation_manager
    closure = tfc.Closure(fn, manager, args=(tf.constant(1, tf.int64), iterator))
    assert tfc.call_flat(closure, manager)
    caller = closure._function
    binds.clear()
    got = [int(caller(tf.constant(code, tf.int64), iterator)) for code in (1, 2, 3)]
    assert got == [1100, 2101, 3102]  # each call's own code, the iterator read in order
    assert len(binds) == 1 and caller.patterns == 1  # bound once: the stock call binds each
    assert int(caller(code=tf.constant(4, tf.int64), it=iterator)) == 4103  # keywords: stock
    assert len(binds) == 2
    assert not tfc.call_flat(tfc.Closure(lambda: 1, manager), manager)  # no concrete function
    # A recovered worker's new iterator is a new pattern; the oldest ones are dropped.
    monkeypatch.setattr(tfc.FlatCaller, "MAX_PATTERNS", 2)
    others = [iter(tf.data.Dataset.range(k * 10, k * 10 + 5)) for k in (1, 2)]
    assert [int(caller(tf.constant(0, tf.int64), it)) for it in others] == [10, 20]
    assert caller.patterns == 2 and int(caller(tf.constant(5, tf.int64), iterator)) == 5104
    assert caller.patterns == 2 and len(binds) == 5  # the first pattern was dropped: bound again
    # Without a cancellation manager (a round's apply, which the chief calls itself).
    bare = tfc.FlatCaller(closure._concrete_function)
    assert int(bare(tf.constant(7, tf.int64), iterator)) == 7105 and bare.patterns == 1


def test_time_closures_records_each_processed_closure_once_per_recorder():
    class FakeWorker:
        def __init__(self, i):
            self.worker_index = i

        def _process_closure(self, closure):
            return closure

    class Fake:
        pass

    coordinator = Fake()
    coordinator._cluster = Fake()
    coordinator._cluster.workers = [FakeWorker(0), FakeWorker(1)]
    got = []
    tfc.time_closures(coordinator, "_tf_hetero_test_mark", lambda w, s, e, c: got.append((w, c)))
    tfc.time_closures(coordinator, "_tf_hetero_test_mark", lambda w, s, e, c: got.append("2nd"))
    assert coordinator._cluster.workers[1]._process_closure("x") == "x"
    assert got == [(1, "x"), "2nd"]


def test_being_scheduled_sets_the_flag_tf_schedule_sets():
    from tensorflow.python.distribute import parameter_server_strategy_v2 as pssv2

    assert "_being_scheduled" in inspect.getsource(pssv2)

    class Fake:
        pass

    strategy = Fake()
    strategy.extended = Fake()
    with tfc.being_scheduled(strategy):
        assert strategy.extended._being_scheduled is True
    assert strategy.extended._being_scheduled is False


# -- tfcompat.strategy -----------------------------------------------------------------------

def test_the_extended_internals_the_adapter_reads_are_still_set():
    with open(inspect.getmodule(tfcompat.strategy.Extended).__file__, encoding="utf-8") as f:
        text = f.read()
    for name in ("self._num_workers = ", "self._num_ps = ", "self._variable_partitioner = ",
                 "self._variable_count += 1", "def _create_variable_round_robin(",
                 "self._should_use_with_coordinator = True", "self._extended = "):
        assert name in text, name
    from tensorflow.python.distribute import distribute_lib

    with open(distribute_lib.__file__, encoding="utf-8") as f:
        assert "extended._retrace_functions_for_each_device = " in f.read()


# -- tfcompat.keras --------------------------------------------------------------------------

def _model():
    model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,))])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def test_the_data_handler_plan_and_wrap():
    from tf_keras.src.engine import data_adapter

    model = _model()
    ds = tf.data.Dataset.from_tensor_slices((np.ones((8, 3)), np.ones((8, 2)))).batch(2)
    handler = data_adapter.get_data_handler(
        x=ds, model=model, steps_per_epoch=4, initial_epoch=1, epochs=3,
        steps_per_execution=tf.Variable(2))
    assert tfcompat.keras.handler_plan(handler) == (4, 2, 2)
    assert tfcompat.keras.handler_plan(object()) is None
    assert "shuffle" in inspect.signature(data_adapter.get_data_handler).parameters or \
        "shuffle" in inspect.getsource(data_adapter.DataHandler.__init__)
    training_source = inspect.getsource(keras.Model.fit)
    assert "get_data_handler" in training_source and "shuffle=" in training_source


def test_a_handler_reads_steps_per_execution_once_and_follows_its_own_assigns():
    """``DataHandler.steps`` reads ``_steps_per_execution`` before every step (under PSS a PS
    variable: a round trip from fit's thread, and after a PS death the first op to meet
    it). Cached, a write behind the handler's back is not seen (no read per step), the
    handler's own partial-execution assign is, and the variable gets it; the steps an epoch
    yields are the same."""
    from tf_keras.src.engine import data_adapter

    spe = tf.Variable(3)
    ds = tf.data.Dataset.from_tensor_slices((np.ones((8, 3)), np.ones((8, 2)))).batch(1)
    handler = data_adapter.get_data_handler(x=ds, model=_model(), steps_per_epoch=8,
                                            epochs=1, steps_per_execution=spe)
    before = list(handler.steps())  # 0, 3, then a partial execution of 2 at 6
    assert tfcompat.keras.cache_steps_per_execution(handler)
    assert not tfcompat.keras.cache_steps_per_execution(handler)  # once
    assert list(handler.steps()) == before == [0, 3, 6]
    assert int(spe.numpy()) == 3  # restored after the partial execution, through the cache
    assert tfcompat.keras.handler_plan(handler)[2] == 3
    spe.assign(5)  # behind the handler's back: the cache is not read again
    assert handler._steps_per_execution.numpy() == 3
    handler._steps_per_execution.assign(2)
    assert handler._steps_per_execution.numpy() == 2 and int(spe.numpy()) == 2


def test_the_wrapped_tf_keras_functions_exist():
    from tf_keras.src.callbacks import CallbackList
    from tf_keras.src.engine import data_adapter

    assert callable(data_adapter.get_data_handler)
    assert callable(CallbackList.on_train_begin)
    assert keras.Model is __import__("tf_keras.src.engine.training",
                                     fromlist=["Model"]).Model


def test_optimizer_classes_cover_the_new_and_legacy_optimizers():
    classes = tuple(tfcompat.keras.optimizer_classes())
    assert isinstance(keras.optimizers.SGD(), classes)
    assert isinstance(keras.optimizers.legacy.SGD(), classes)
    assert all("apply_gradients" in c.__dict__ for c in classes)


def test_the_running_fit_is_found_on_the_stack():
    seen = {}

    class Probe(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen["fit"] = tfcompat.keras.calling_fit()
            seen["running"] = tfcompat.keras.fit_running(seen["fit"])

    _model().fit(np.ones((4, 3)), np.ones((4, 2)), epochs=1, verbose=0, callbacks=[Probe()])
    assert seen["fit"] is not None and seen["running"]
    assert not tfcompat.keras.fit_running(seen["fit"])  # the fit returned
    assert tfcompat.keras.calling_fit() is None


# -- tfcompat.ops ----------------------------------------------------------------------------

def test_the_sleep_dataset_sleeps():
    ds = tf.data.Dataset.from_tensors(0).apply(tfcompat.ops.sleep_dataset(tf.constant(50_000,
                                                                                 tf.int64)))
    t0 = time.perf_counter()
    list(ds)
    assert time.perf_counter() - t0 >= 0.045


def test_variable_classes_functions_and_placement():
    base, resource = tfcompat.ops.resource_variable_classes()
    v = tf.Variable(1.0)
    assert isinstance(v, base) and issubclass(resource, base)
    assert "assign_add" in base.__dict__
    assert isinstance(tfcompat.ops.ResourceVariable(1.0), resource)
    assert tfcompat.ops.v1_optimizer_class() is tf.compat.v1.train.Optimizer
    assert tfcompat.ops.autograph_enabled(tf.function(lambda: 1))
    assert not tfcompat.ops.autograph_enabled(tf.function(lambda: 1, autograph=False))
    here = tf.config.list_logical_devices("CPU")[0].name  # this process's job, whichever
    with tfcompat.ops.placed_on(here):
        placed = tf.Variable(2.0)
    assert placed.device.endswith("CPU:0")


def test_dataset_batch_size_walks_up_the_pipeline():
    ds = tf.data.Dataset.range(10).batch(4).repeat().map(lambda x: x).prefetch(1)
    assert tfcompat.ops.dataset_batch_size(ds) == 4
    assert tfcompat.ops.dataset_batch_size(tf.data.Dataset.range(3)) is None


def test_device_datasets_wrap_target_and_local_job():
    from tensorflow.python.data.ops import multi_device_iterator_ops

    assert callable(multi_device_iterator_ops._create_device_dataset)
    assert tfcompat.ops.keep_only_local_job(set()) is False  # no cluster connected


def test_a_replaced_put_back_says_whether_the_closure_goes_back_or_is_cancelled(queue):
    class Closure:
        tag, cancelled = None, False

        def mark_cancelled(self):
            self.cancelled = True

    seen = []
    queue.replace_put_back(seen.append)
    queue.raw.inflight_closure_count = 2
    first = Closure()
    queue.raw.put_back(first)  # no error: back on the queue, to run again
    assert queue.raw._queue.get(block=False) is first and not first.cancelled
    queue.fail(RuntimeError("the fit failed"))
    second = Closure()
    queue.raw.put_back(second)  # the queue holds an error: cancelled
    assert second.cancelled and queue.raw._queue.empty()
    assert seen == [True, False] and queue.raw.inflight_closure_count == 0
    with pytest.raises(AssertionError, match="no inflight closures"):
        queue.raw.put_back(Closure())


def test_a_cancelled_cancellation_manager_is_renewed(queue):
    """A function run under a cancelled manager is cancelled before it starts; the queue
    gets a new manager only if its own was cancelled (what a failover needs after a closure
    failed on a dead PS: docs/TF_INTERNALS.md)."""
    manager = queue.cancellation_manager
    assert not queue.renew_cancellation() and queue.cancellation_manager is manager
    concrete = tf.function(lambda x: x + 1).get_concrete_function(tf.constant(1))
    manager.start_cancel()
    with pytest.raises(tf.errors.CancelledError):
        manager.get_cancelable_function(concrete)(tf.constant(1))
    assert queue.renew_cancellation()
    renewed = queue.cancellation_manager
    assert renewed is not manager and not renewed.is_cancelled
    assert int(renewed.get_cancelable_function(concrete)(tf.constant(1))) == 2


def test_queued_closures_are_taken_out_in_order_and_a_waiting_put_goes_on(queue):
    """ASP's failover takes every queued step out of TF's queue to make it again: in order,
    the per-worker queues untouched, and room made for a ``put`` waiting on a full queue."""
    a, b, pinned = _closure(), _closure(), _closure()
    queue.raw.put(a)
    queue.raw.put(b)
    queue.raw.put(pinned, tag=0)
    assert queue.take_queued() == [a, b]
    assert queue.take_queued() == []
    assert queue.raw.get(tag=0) is pinned


def test_an_untraced_copy_traces_again_and_leaves_the_function_as_it_was():
    """What ASP's failover runs after variables were created again on another PS: a copy of
    the step's ``tf.function`` with its options and none of its traces."""
    traces = []

    @tf.function(reduce_retracing=True)
    def step(x):
        traces.append(1)
        return x * 2

    assert int(step(tf.constant(2))) == 4 and len(traces) == 1
    copy = tfcompat.ops.untraced_copy(step)
    assert int(copy(tf.constant(3))) == 6 and len(traces) == 2  # traced again
    assert int(step(tf.constant(5))) == 10 and len(traces) == 2  # the original's trace kept
    assert copy.python_function is step.python_function


class _Result:
    """A ``RemoteValue`` stand-in: counts waits and copies (``get``)."""

    def __init__(self):
        self.waited, self.copied = 0, 0

    def _wait_and_maybe_error(self):
        self.waited += 1

    def get(self):
        self.copied += 1
        return "copy"


class _Closure:
    def __init__(self, result):
        self._output_remote_value_ref = weakref.ref(result)


def test_a_result_left_on_its_worker_skips_only_its_runners_copy_with_runs_overlapping():
    """``result_left_on_worker``: TF's copy after running the closure (``get`` on the worker
    thread) only waits, a ``get`` from any other thread copies; and two worker threads
    running the same closure at once (TF puts a closure back after a worker failure and
    another thread runs it while the first is still in its failure handling) leave and
    exit in any order (CI: the first's exit once raised AttributeError and ended its
    worker's thread)."""

    result = _Result()
    closure = _Closure(result)
    first = tfcompat.coordinator.result_left_on_worker(closure)
    first.__enter__()
    assert result.get() is None and result.waited == 1 and result.copied == 0
    seen = []
    entered, leave = threading.Event(), threading.Event()

    def other_worker():  # runs the same closure, leaves its block first
        with tfcompat.coordinator.result_left_on_worker(closure):
            seen.append(result.get())
            entered.set()
            leave.wait(5)
        seen.append(result.get())  # out of its block: a copy

    thread = threading.Thread(target=other_worker)
    thread.start()
    assert entered.wait(5)
    leave.set()
    thread.join(5)
    assert seen == [None, "copy"]
    assert result.get() is None  # this thread is still in its block
    first.__exit__(None, None, None)  # no AttributeError
    assert result.get() == "copy" and result.copied == 2


def test_a_result_left_on_its_worker_is_copied_there_when_copy_when_picks_it():
    """``copy_when``, asked when the worker thread's ``get`` comes (after the closure ran):
    a result it picks is copied there, as TF would; one it does not only waits."""

    result = _Result()
    held = []
    with tfcompat.coordinator.result_left_on_worker(_Closure(result),
                                                    copy_when=lambda r: r in held):
        assert result.get() is None and (result.waited, result.copied) == (1, 0)
        held.append(result)  # e.g. fit scheduled no step after it: it holds this one
        assert result.get() == "copy" and result.copied == 1
