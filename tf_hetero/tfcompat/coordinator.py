"""``ClusterCoordinator`` internals: the closure queue, worker threads, closures and remote
values (tensorflow/python/distribute/coordinator/cluster_coordinator.py, "cc" below, and
coordinator/values.py).

TF's coordinator has no extension points: tf-hetero pins closures to workers through the
queue's per-worker tagged queues (TF uses them for per-worker resources only and counts them
nowhere), hooks each worker thread's closure processing, and fails or clears a fit through the
queue's error. Each of those reaches is one function or method here.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import weakref
from typing import Callable, Iterator

from tensorflow.python.distribute.coordinator import cluster_coordinator as cc
from tensorflow.python.distribute.coordinator import values as coordinator_values
from tensorflow.python.eager import cancellation
from tensorflow.python.eager.polymorphic_function import function_type_utils
from tensorflow.python.framework import tensor as tensor_lib

__all__ = ["ClusterCoordinator", "Closure", "PerWorkerValues", "ClosureQueue", "initialized",
           "coordinator_of", "queue_of",
           "workers_of", "rebuild_resources", "refresh_cluster", "task_addresses",
           "stop_cluster", "hook_worker", "execute_holding", "time_closures",
           "set_first_arg", "output_built", "call_flat", "FlatCaller",
           "remote_value_ready", "remote_values", "fetched_tensors", "set_remote_value",
           "wrap_remote_wait", "result_left_on_worker", "copy_to_chief", "being_scheduled",
           "own_executor"]

#: The public classes, re-exported so that callers import nothing from ``tensorflow.python``.
ClusterCoordinator = cc.ClusterCoordinator
Closure = cc.Closure
PerWorkerValues = coordinator_values.PerWorkerValues

# pylint: disable=protected-access


class ClosureQueue:
    """tf-hetero's view of a coordinator's ``_CoordinatedClosureQueue`` (cc ~363-560). This
    class is thread-safe as TF's queue is: every read-modify-write below holds the queue's
    own lock (``_queue_lock``), the lock TF's ``put``/``get``/``mark_finished`` take.

    The public methods of TF's queue (``put``, ``get``, ``wait``, ``mark_finished``,
    ``inflight_closure_count``) are used on :attr:`raw` directly.
    """

    def __init__(self, queue):
        #: TF's queue object.
        self.raw = queue

    @property
    def lock(self) -> threading.Lock:
        """The queue's lock (``_queue_lock``)."""
        return self.raw._queue_lock

    @property
    def error(self) -> BaseException | None:
        """The error a closure left (``_error``): TF raises it from the next ``put``/``wait``."""
        return self.raw._error

    @property
    def cancellation_manager(self):
        """The manager new closures are made with (``_cancellation_mgr``)."""
        return self.raw._cancellation_mgr

    def fail(self, error: BaseException) -> None:
        """Sets ``error`` as the queue's error unless one is set, and wakes its waiters: the
        next ``schedule``/``join`` raises it, as after a failing closure."""
        with self.lock:
            if self.raw._error is None:
                self.raw._error = error
            self.raw._stop_waiting_condition.notify_all()

    def clear_error(self) -> None:
        """What TF's ``join`` does once it raised the error: cancels what is queued and
        forgets the error, so the next fit starts clean."""
        with self.lock:
            if self.raw._error is not None:
                self.raw._cancel_all_closures()
                self.raw._error = None

    def renew_cancellation(self) -> bool:
        """Gives the queue a new cancellation manager if its current one was cancelled;
        returns whether it did. TF renews it only in ``_cancel_all_closures`` (cc ~428), but
        after closures failed on a dead PS task it was found cancelled without that (measured
        in chaos runs; which TF code cancels it was not traced), and every closure made
        afterwards with it was cancelled before it started (``RemoteExecuteNode::RunAsync``),
        docs/TF_INTERNALS.md §3."""
        with self.lock:
            if not self.raw._cancellation_mgr.is_cancelled:
                return False
            self.raw._cancellation_mgr = cancellation.CancellationManager()
            return True

    def count_pinned(self, n: int) -> None:
        """``n`` more closures in flight: TF counts no tagged closure (cc ~363), so a pinned
        closure is counted here, and ``join`` waits for it."""
        with self.lock:
            self.raw.inflight_closure_count += n

    def take_pinned(self, worker: int, take: Callable[[object], bool]) -> list:
        """Removes the closures queued for ``worker`` (its tagged queue) for which ``take``
        is true, uncounts them and returns them; the others stay queued in order."""
        with self.lock:
            tagged = self.raw._tagged_queue[worker]
            taken, keep = [], []
            while not tagged.empty():
                c = tagged.get(block=False)
                (taken if take(c) else keep).append(c)
            for c in keep:
                tagged.put(c, block=False)
            self.raw.inflight_closure_count -= len(taken)
        return taken

    def take_queued(self) -> list:
        """Removes every closure from the shared queue (``_queue``; not the workers' own
        tagged queues) and returns them in order; a ``put`` waiting for room goes on."""
        with self.lock:
            taken = []
            while not self.raw._queue.empty():
                taken.append(self.raw._queue.get(block=False))
            self.raw._queue_free_slot_condition.notify_all()
        return taken

    def replace_mark_failed(self, keep_error: Callable[[BaseException], bool],
                            seen: Callable[[BaseException], None] = lambda e: None) -> None:
        """Replaces the queue's ``mark_failed`` (cc ~520) by TF's body with one change: the
        error is kept only if ``keep_error(e)`` (asked under the queue's lock). ``seen(e)``
        is called first, outside it."""
        queue = self.raw

        def mark_failed(e):
            seen(e)
            with queue._queue_lock:
                if queue._inflight_closure_count < 1:
                    raise AssertionError("There is no inflight closures to mark_failed.")
                if queue._error is None and keep_error(e):
                    queue._error = e
                queue.inflight_closure_count -= 1
                if queue._inflight_closure_count == 0:
                    queue._no_inflight_closure_condition.notify_all()
                queue._stop_waiting_condition.notify_all()

        queue.mark_failed = mark_failed

    def replace_put_back(self, seen: Callable[[bool], None]) -> None:
        """Replaces the queue's ``put_back`` (cc ~514; TF calls it on a worker thread for a
        closure that met a transient failure, or after a worker failure) by TF's body (its
        queue-size metric aside) with one addition: ``seen(requeued)`` is told, under the
        queue's lock, whether the closure went back to the queue to run again (True) or was
        cancelled because the queue holds an error (False)."""
        queue = self.raw

        def put_back(closure):
            assert closure.tag is None
            with queue._queue_lock:
                if queue._inflight_closure_count < 1:
                    raise AssertionError("There is no inflight closures to put_back.")
                seen(queue._error is None)
                if queue._error:
                    closure.mark_cancelled()
                else:
                    queue._queue_free_slot_condition.wait_for(lambda: not queue._queue.full())
                    queue._queue.put(closure, block=False)
                    queue._closures_queued_condition.notify()
                queue.inflight_closure_count -= 1
                if queue._inflight_closure_count == 0:
                    queue._no_inflight_closure_condition.notify_all()

        queue.put_back = put_back


def initialized(coordinator) -> bool:
    """True once ``ClusterCoordinator.__init__`` ran on this instance (``_has_initialized``):
    TF caches one coordinator per strategy and Python re-runs ``__init__`` on every
    ``ClusterCoordinator(strategy)`` call (cc ~1472)."""
    return getattr(coordinator, "_has_initialized", False)


def coordinator_of(strategy):
    """The coordinator TF cached for ``strategy`` (``_cluster_coordinator``), or ``None``."""
    return getattr(strategy, "_cluster_coordinator", None)


def queue_of(coordinator) -> ClosureQueue:
    """The coordinator's closure queue (``_cluster.closure_queue``)."""
    return ClosureQueue(coordinator._cluster.closure_queue)


def workers_of(coordinator) -> list:
    """The coordinator's ``Worker`` objects (``_cluster.workers``), one per worker task;
    ``worker.worker_index`` is public."""
    return list(coordinator._cluster.workers)


def rebuild_resources(worker, variables=()) -> int:
    """Creates ``worker``'s per-worker datasets and iterators again, as TF does when a failed
    worker comes back (``Worker._on_worker_recovery``, without marking the worker recovered),
    and of its per-worker variables those of ``variables`` (created again with their initial
    value; the others are left as they are): each resource closure is queued again on the
    worker's own queue, which the worker reads before the shared one, so it runs before any
    closure the worker takes after this call, and fills the same ``RemoteValue``. Returns
    how many were queued."""
    index = worker.worker_index
    remake = {id(v._per_worker_vars._values[index]) for v in variables
              if v._per_worker_vars is not None}
    queued = 0
    with worker._resource_tracking_lock:
        for ref in worker._resource_remote_value_refs:
            resource = ref()
            if resource is None:
                continue
            if (not isinstance(resource._closure, cc.PerWorkerVariableClosure)
                    or id(resource) in remake):
                worker._schedule_resource(resource._closure)
                queued += 1
    return queued


def refresh_cluster(coordinator) -> None:
    """Updates the chief's eager context with the cluster's server def, as TF's preemption
    handler does when a worker comes back (``WorkerPreemptionHandler``: under its
    ``_cluster_update_lock``, ``context.context().update_server_def(self._server_def)``,
    cc ~993): a task restarted on its address is reachable again afterwards (measured for a
    PS task, benchmarks/tf_probes/ps_rejoin.py). Raises what TF raises if a task does not
    answer."""
    from tensorflow.python.eager import context

    handler = coordinator._cluster.failure_handler
    with handler._cluster_update_lock:
        context.context().update_server_def(handler._server_def)


def task_addresses(coordinator) -> dict:
    """``{(job, index): "host:port"}`` of every task in the server def the coordinator's
    preemption handler updates the cluster with (:func:`refresh_cluster`)."""
    cluster = coordinator._cluster.failure_handler._server_def.cluster
    return {(job.name, int(index)): address for job in cluster.job
            for index, address in job.tasks.items()}


def stop_cluster(coordinator) -> None:
    """Stops the coordinator's worker threads and closure queue (``_cluster.stop()``)."""
    coordinator._cluster.stop()


def hook_worker(worker, *, process_closure=None, on_closure_failure=None,
                on_worker_recovery=None, process_resource_closure=None) -> None:
    """Wraps a ``Worker``'s ``_process_closure(closure)``, ``_on_closure_failure(closure,
    error)``, ``_on_worker_recovery()`` and ``_process_resource_closure(closure)`` (cc
    ~1080-1155; a per-worker resource, e.g. a fit's iterator, is built by the last). Each
    argument is a function that takes TF's method and returns its replacement."""
    for name, make in (("_process_closure", process_closure),
                       ("_on_closure_failure", on_closure_failure),
                       ("_on_worker_recovery", on_worker_recovery),
                       ("_process_resource_closure", process_resource_closure)):
        if make is not None:
            setattr(worker, name, make(getattr(worker, name)))


def execute_holding(closure, lock) -> None:
    """Makes ``closure`` hold ``lock`` while it executes (``Closure.execute_on``, cc ~250: the
    function's run on its worker, for a resource closure the resource's building), and only
    then: TF's failure handling around it (a recovery wait of up to an hour) runs without
    it. Idempotent: a resource closure scheduled again after a worker's recovery is the same
    object."""
    if getattr(closure, "_tf_hetero_holds", None) is lock:
        return
    # The closure through a weak reference and its class's method: a wrapper holding the
    # closure (or its bound method) would make a reference cycle, and the closure, its
    # function and the resources it captures would then be freed by a garbage collection on
    # whatever thread runs it, instead of when TF drops them.
    execute, ref = type(closure).execute_on, weakref.ref(closure)

    def execute_on(worker):
        with lock:
            execute(ref(), worker)

    closure.execute_on = execute_on
    closure._tf_hetero_holds = lock


def time_closures(coordinator, mark: str, record) -> list:
    """Calls ``record(worker_index, start, end, closure)`` after each closure a worker thread
    of ``coordinator`` processes (``Worker._process_closure``, wrapped once per worker, the
    wrap found again by the attribute ``mark``). Returns each worker's list of recorders under
    ``mark``: ``record`` is added to each; remove it from them to stop."""
    lists = []
    for worker in coordinator._cluster.workers:
        recorders = getattr(worker, mark, None)
        if recorders is None:
            recorders = []
            setattr(worker, mark, recorders)

            def timed(process, closure, _worker=worker, _recorders=recorders):
                start = time.perf_counter()
                try:
                    return process(closure)
                finally:
                    end = time.perf_counter()
                    for r in list(_recorders):
                        r(_worker.worker_index, start, end, closure)

            hook_worker(worker, process_closure=lambda tf_fn, timed=timed:
                        functools.partial(timed, tf_fn))
        recorders.append(record)
        lists.append(recorders)
    return lists


def set_first_arg(closure, value) -> None:
    """Replaces the first positional argument a closure will call its function with
    (``Closure._args``)."""
    closure._args = (value,) + tuple(closure._args[1:])


class FlatCaller:
    """Calls a closure's concrete function with its inputs flattened once per argument
    pattern, instead of binding and casting them against the function's signature at every
    call (``ConcreteFunction.__call__``: ``canonicalize_function_inputs`` and
    ``unpack_inputs``, ~70% of the Python a closure's launch spends in the call, measured
    with yappi on the chief of a 4-worker H-PS fit: docs/MEASUREMENT.md).

    A pattern is the identity of each non-tensor argument (the worker's iterator: the same
    object at every call on that worker) and the dtype and shape of each tensor argument
    (the task code); its flat inputs are computed the stock way once, with each tensor
    argument's place in them, and later calls put their own tensors in those places. The
    kept arguments hold their identities. Keyword arguments, or a tensor argument not found
    exactly once in the flat inputs, take the stock call. Runs under the closure's
    cancellation manager, as the stock ``cancellable`` wrapper does (``None``: a function the
    chief calls itself, a round's apply). Thread-safe: a worker's thread and the others share
    one caller.

    At most :attr:`MAX_PATTERNS` patterns are kept, the oldest dropped first: a worker's
    recovery hands its closures a new iterator object (a new pattern), and the old one's
    template would otherwise hold that dead iterator for the rest of the fit."""

    #: Argument patterns kept: a fit has one per worker (above a 1000-worker cluster's, so
    #: none is bound twice there) and each recovery of a worker adds one.
    MAX_PATTERNS = 4096

    def __init__(self, concrete, manager=None):
        self._concrete, self._manager = concrete, manager
        self._templates: dict = {}
        self._lock = threading.Lock()

    @property
    def patterns(self) -> int:
        """Argument patterns flattened so far."""
        return len(self._templates)

    def __call__(self, *args, **kwargs):
        if kwargs:
            return self._stock(args, kwargs)
        key = tuple(("tensor", a.dtype, tuple(a.shape)) if isinstance(a, tensor_lib.Tensor)
                    else id(a) for a in args)
        template = self._templates.get(key)
        if template is None:
            with self._lock:
                template = self._templates.get(key) or self._template(args, key)
        kept, flat, places = template
        if flat is None:  # a pattern the flat call cannot take
            return self._stock(args, kwargs)
        flat = list(flat)
        for position, index in places:
            flat[index] = args[position]
        with self._cancellable():
            return self._concrete._call_flat(flat, self._concrete.captured_inputs)

    def _template(self, args, key):
        bound = function_type_utils.canonicalize_function_inputs(
            args, {}, self._concrete.function_type)
        flat = list(self._concrete.function_type.unpack_inputs(bound))
        places = []
        for position, arg in enumerate(args):
            if isinstance(arg, tensor_lib.Tensor):
                found = [i for i, x in enumerate(flat) if x is arg]
                if len(found) != 1:
                    flat = None
                    break
                places.append((position, found[0]))
        template = (args, flat, tuple(places))
        while len(self._templates) >= self.MAX_PATTERNS:  # the oldest first (insertion order)
            del self._templates[next(iter(self._templates))]
        self._templates[key] = template
        return template

    def _stock(self, args, kwargs):
        with self._cancellable():
            return self._concrete(*args, **kwargs)

    def _cancellable(self):
        if self._manager is None:
            return contextlib.nullcontext()
        return cancellation.CancellationManagerContext(self._manager)


def call_flat(closure, manager) -> bool:
    """Makes ``closure`` (and the copies made of it from now on) call its concrete function
    through a :class:`FlatCaller` under cancellation manager ``manager`` (the one it was
    built with). False, and nothing changed, for a closure of a plain Python function."""
    concrete = getattr(closure, "_concrete_function", None)
    if concrete is None or getattr(concrete, "function_type", None) is None:
        return False
    closure._function = FlatCaller(concrete, manager)
    return True


def output_built(closure) -> bool:
    """True once ``build_output_remote_value`` was called on ``closure``."""
    return closure._output_remote_value_ref is not None


def remote_value_ready(remote_value) -> threading.Event:
    """The event set when a ``RemoteValue`` has its value or error
    (``_status_available_event``)."""
    return remote_value._status_available_event


def remote_values(remote_value):
    """The values a finished ``RemoteValue`` holds (``_values``; ``None`` if it has none)."""
    return getattr(remote_value, "_values", None)


def fetched_tensors(remote_value):
    """The tensors a ``RemoteValue`` was fetched to on the chief (``_fetched_tensors``;
    ``None`` before a fetch)."""
    return getattr(remote_value, "_fetched_tensors", None)


def set_remote_value(remote_value, values) -> None:
    """Ends a ``RemoteValue`` with ``values`` (``_set_values``), as its closure would."""
    remote_value._set_values(values)


def wrap_remote_wait(remote_value, make: Callable[[Callable[[], None]], Callable[[], None]]
                     ) -> None:
    """Wraps the wait behind a ``RemoteValue``'s ``fetch``/``get``
    (``_wait_and_maybe_error``): ``make`` takes TF's and returns its replacement."""
    remote_value._wait_and_maybe_error = make(remote_value._wait_and_maybe_error)


_NO_COPY_LOCK = threading.Lock()  # result_left_on_worker's install on a result


@contextlib.contextmanager
def result_left_on_worker(closure, copy_when: Callable[[object], bool] | None = None
                          ) -> Iterator[None]:
    """While this thread processes ``closure``: no copy of its result to the chief, unless
    ``copy_when(result)`` says so when TF asks for it.

    After running a closure whose result someone holds, TF's worker thread copies the result
    to the chief (``Worker._process_closure``: ``r.get()``, an ``identity`` on the chief that
    receives each tensor: a round trip on the worker's thread, with no timeout of its own;
    docs/TF_INTERNALS.md, "A hang seen twice"). Within this block that call, on this thread,
    only waits for the result (raising its error, as TF's ``get`` would); the result's values
    are set as usual (``_values``: remote handles) and a ``get``/``fetch`` from another
    thread (``fit``'s logs) copies them, as TF's would. A result ``copy_when`` picks (asked
    on the worker thread once the closure ran) is copied there as TF would: one that must
    outlive its worker.
    """
    ref = closure._output_remote_value_ref
    remote_value = ref() if ref is not None else None
    if remote_value is None:  # nobody holds the result: TF copies nothing anyway
        yield
        return
    with _NO_COPY_LOCK:
        threads = remote_value.__dict__.get("_tf_hetero_no_copy")
        if threads is None:
            # Installed once per result and left in place: after a worker failure TF puts
            # the closure back and another worker thread may run it while this one is
            # still in its failure handling, so the threads that skip the copy are a set.
            threads = remote_value._tf_hetero_no_copy = set()
            stock = type(remote_value).get

            def get():
                if threading.get_ident() in threads and not (
                        copy_when is not None and copy_when(remote_value)):
                    remote_value._wait_and_maybe_error()
                    return None
                return stock(remote_value)

            remote_value.get = get
    me = threading.get_ident()
    threads.add(me)
    try:
        yield
    finally:
        threads.discard(me)


def copy_to_chief(remote_value) -> None:
    """Copies a finished ``RemoteValue``'s result to the chief now, as TF's worker thread
    does after running its closure (what :func:`result_left_on_worker` skipped); later
    ``fetch``/``get`` calls read the copy. Nothing for ``None``, a result not ready, one
    that ended with an error (its reader raises it) or one copied already."""
    if remote_value is None or not remote_value_ready(remote_value).is_set():
        return
    if remote_value._error is not None or remote_value._has_fetched_to_local:
        return
    remote_value.get()


@contextlib.contextmanager
def being_scheduled(strategy) -> Iterator[None]:
    """While a closure is built: the strategy's ``_being_scheduled`` flag, which TF sets in
    ``schedule`` so that a function traced then does not warn that it was "invoked without
    schedule" (pssv2). The flag is shared by every thread: hold a lock around this."""
    strategy.extended._being_scheduled = True
    try:
        yield
    finally:
        strategy.extended._being_scheduled = False


@contextlib.contextmanager
def own_executor() -> Iterator[None]:
    """Runs the calling thread's eager ops inside on an executor of their own (a synchronous
    one, as TF gives each worker thread: ``executor.new_executor``, ``context.executor_scope``).

    Why: a worker thread leaves ``Closure.execute_on``'s ``executor_scope`` by dropping a
    wrapper of the executor it had before, the context's default one, and the wrapper's
    ``__del__`` waits for every pending node of that executor. So while any thread of the
    chief blocks in an eager op on the default executor (a queue's dequeue, a long apply), no
    closure can end: measured, a closure of a constant did not end in 10 s while another
    thread waited in a dequeue, and ended at once with that dequeue on its own executor
    (docs/TF_INTERNALS.md, "A closure cannot end while the chief blocks in an eager op")."""
    from tensorflow.python.eager import context, executor

    with context.executor_scope(executor.new_executor(enable_async=False)):
        yield
