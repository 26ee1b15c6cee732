"""The token launch's carriers (docs/decisions/0017-rounds-at-scale.md, issue 49 item 5): one
long-running closure per worker runs a step for every token it is given, so that the chief's
TensorFlow calls per round are two, whatever the number of workers, instead of one closure
launch per task (~1.5 ms of the chief's CPU each, record 0017).

A carrier loops on queues that live on a PS task (lane ``l``'s on PS ``l % P`` of the ``P``
PS tasks given, all of them by default)::

    token = its lane's token queue.dequeue()   # blocks until the chief releases the lane
    if token == STOP: end                      # returns how many steps it ran
    outputs = step(token, *args)               # e.g. a round's task, its task code the token
    done queue.enqueue(lane, token, start, end, *outputs)

One trace per PS task serves every worker whose lane is on it: the lane is an argument and
the lane's queue is gathered from that PS's stacked queue handles. Every op of the step runs
after its token was dequeued, so a step reads the variables as they were when its token was
released: the rounds stay exact. The chief per round calls :meth:`Carriers.release` (one
function over the PS tasks: each lane's token) and :meth:`Carriers.collect` (a dequeue of
the round's done records from each PS). What the chief no longer pays per task, the PS holding
a lane's queues does: ~1.5 ms of its CPU per token on the 2-core development machine
(record 0017), which is why the lanes are spread over the PS tasks. With more than one PS a
collect takes every done record out (a first-k-of-N collect would wait on one PS's queue
while another's records came first): a round that closes on part of its tasks needs
``ps_devices`` of one PS.

Every wait is bounded. TensorFlow's queue ops have no timeout, so the carriers' guard (a
thread) closes every queue, which wakes each blocked dequeue with an error, when a collect's
bound passes or a carrier ends before it was stopped (its step raised, its worker failed);
the collect then raises :class:`CarrierError` saying which lanes it waited for, and so do the
coordinator's next ``schedule`` and ``join``. Closed queues stay closed: after an abort the
launch makes new carriers. A step that never returns holds its worker's closure: an abort
cannot end it (as no TF closure can be ended), so a step that may block must have a bound of
its own.

Usage (on a ``ClusterCoordinator`` of a parameter-server strategy; ``tests/strategies/
runtime/test_carriers.py`` runs it)::

    carriers = Carriers(coordinator, step, (per_worker_iterator,), workers=range(n),
                        output_signature=tf.TensorSpec([], tf.float32))
    carriers.start()
    for r in range(rounds):
        carriers.release({lane: token_of(r, lane) for lane in range(n)})
        records = carriers.collect(n, timeout_s=60)   # DoneRecords: lanes, tokens, times, outputs
        apply(records)                                # on the chief, before the next release
    carriers.stop(timeout_s=60)
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.engine import EngineError
from tf_hetero.strategies.runtime.errors import fail_fit
from tf_hetero.strategies.runtime.intercept import patch_lock

__all__ = ["Carriers", "CarrierError", "DoneRecords", "STOP"]

#: The token that ends a carrier's loop. Task codes are >= 0 and ``NO_ROUND`` is -1 (a task
#: whose round closed: it runs and writes nothing), so the stop token is neither.
STOP = -2

_TOKEN_CAPACITY = 2  # a lane holds at most one released token, and the stop token after it


class CarrierError(EngineError):
    """The carriers stopped before they were asked to: a collect's bound passed, or a carrier
    ended (its step raised, its worker failed). Its queues are closed."""


@dataclasses.dataclass(frozen=True)
class DoneRecords:
    """What one :meth:`Carriers.collect` took, one entry per step, PS by PS, in the order
    each PS's done queue received them: the lane, the token, the worker's ``tf.timestamp()``
    at the step's start and end (seconds; one worker's clock, so only differences within a
    lane are meaningful), and the step's outputs (its output structure, each leaf with the
    records first)."""

    lanes: np.ndarray
    tokens: np.ndarray
    started: np.ndarray
    ended: np.ndarray
    outputs: object


class Carriers:
    """Carriers for ``workers`` (lane ``i`` runs on worker ``workers[i]``) of ``step(token,
    *args)``, a function whose outputs match ``output_signature`` (a structure of
    ``tf.TensorSpec``); ``args`` may hold per-worker values (a per-worker iterator). Lane
    ``l``'s queues live on ``ps_devices[l % len(ps_devices)]`` (default: every PS task of the
    coordinator's strategy)."""

    def __init__(self, coordinator, step, args: tuple = (), *, workers: Iterable[int],
                 output_signature, ps_devices: Sequence[str] | None = None,
                 poll_s: float = 0.05, end_timeout_s: float = 10.0):
        self.coordinator = coordinator
        self.workers = [int(w) for w in workers]
        if not self.workers or len(set(self.workers)) != len(self.workers):
            raise ValueError(f"Carriers: workers {self.workers}: need at least one worker, "
                             "each at most once (one carrier per worker).")
        self.signature = output_signature
        self._step, self._args = step, tuple(args)
        if ps_devices is None:
            count = max(1, tfcompat.strategy.num_ps(coordinator.strategy))
            ps_devices = [f"/job:ps/replica:0/task:{i}" for i in range(count)]
        if not ps_devices:
            raise ValueError("Carriers: ps_devices is empty: give at least one PS task's "
                             "device, e.g. ['/job:ps/replica:0/task:0'].")
        #: The guard's period; how long a failed collect waits for the carriers to end (so
        #: that none fails after the error reached the caller: its failure would be taken
        #: for the next fit's).
        self.poll_s, self.end_timeout_s = poll_s, end_timeout_s
        n = len(self.workers)
        devices = list(ps_devices)[:n]  # one shard per PS task that holds lanes
        self._shards = [_Shard(device, range(p, n, len(devices)), output_signature)
                        for p, device in enumerate(devices)]
        self._ps_of = np.arange(n) % len(devices)  # lane -> its shard
        self._carriers = [tf.function(functools.partial(self._carrier_fn, shard))
                          for shard in self._shards]
        self._close_fn = _close_function(self._shards)
        self._releases: dict = {}  # lanes released together -> their release function
        self._out = np.zeros(n, np.int64)  # tokens released and not yet collected, per lane
        self._results: list = []  # each carrier's output RemoteValue
        self._lock = threading.Lock()
        self._error: CarrierError | None = None
        self._stopping = False
        #: The collect under way: (monotonic bound, count, its timeout, the lanes it waits on).
        self._deadline: tuple | None = None

    # ------------------------------------------------------------------ public API
    @property
    def num_lanes(self) -> int:
        return len(self.workers)

    @property
    def ps_devices(self) -> list[str]:
        """The PS tasks holding lanes' queues: lane ``l``'s is ``ps_devices[l % P]``."""
        return [shard.device for shard in self._shards]

    @property
    def traces(self) -> int:
        """How many times a carrier function was traced (one per PS task serves every
        worker whose lane is on it)."""
        return sum(c.experimental_get_tracing_count() for c in self._carriers)

    @property
    def error(self) -> CarrierError | None:
        """Why the carriers stopped unasked (their queues are closed), or ``None``."""
        return self._error

    def start(self) -> None:
        """Puts one carrier on each worker's own queue (one trace per PS task)."""
        if self._results:
            raise ValueError("Carriers.start: the carriers already run; stop() ends them.")
        queue = tfcompat.coordinator.queue_of(self.coordinator)
        strategy = self.coordinator.strategy
        for lane, worker in enumerate(self.workers):
            shard, slot = self._place(lane)
            args = (tf.constant(lane, tf.int64), tf.constant(slot, tf.int64),
                    shard.handles) + self._args
            with strategy.scope(), patch_lock, tfcompat.coordinator.being_scheduled(strategy):
                closure = tfcompat.coordinator.Closure(
                    self._carriers[self._ps_of[lane]], queue.cancellation_manager, args=args)
            self._results.append(closure.build_output_remote_value())
            queue.count_pinned(1)  # TF counts no pinned closure: join waits for it
            queue.raw.put(closure, tag=worker)
        threading.Thread(target=_guard_loop, args=(weakref.ref(self),), daemon=True,
                         name="tf-hetero-carrier-guard").start()

    def release(self, tokens: Mapping[int, int]) -> None:
        """Gives lane ``l`` the token ``tokens[l]`` (>= -1), in one function over their PS
        tasks. A lane holds one token at a time: collect its done record before its next."""
        self._raise_if_stopped()
        lanes = np.fromiter(tokens.keys(), np.int64, len(tokens))
        values = np.fromiter(tokens.values(), np.int64, len(tokens))
        bad = [int(lane) for lane in lanes if not 0 <= lane < self.num_lanes]
        if bad:
            raise ValueError(f"Carriers.release: lanes {bad} do not exist (0 to "
                             f"{self.num_lanes - 1}).")
        if (values < -1).any():
            raise ValueError(f"Carriers.release: tokens {values[values < -1].tolist()} are "
                             "reserved (STOP is -2): a token is a task code (>= 0) or -1.")
        busy = lanes[self._out[lanes] > 0]
        if busy.size:
            raise ValueError(f"Carriers.release: lanes {busy.tolist()} still hold a token: "
                             "collect their done records before releasing them again.")
        order = np.argsort(lanes)  # one trace per set of lanes, whatever their order
        self._release_for(tuple(lanes[order].tolist()))(tf.constant(values[order]))
        self._out[lanes] += 1

    def collect(self, count: int, timeout_s: float) -> DoneRecords:
        """The next ``count`` done records, waiting at most ``timeout_s`` for them (with the
        queues on several PS tasks: every record out, ``count`` their number)."""
        self._raise_if_stopped()
        out = int(self._out.sum())
        if not 0 < count <= out:
            raise ValueError(f"Carriers.collect({count}): {out} token(s) are out; collect "
                             "between 1 and that many.")
        if count < out and len(self._shards) > 1:
            raise ValueError(
                f"Carriers.collect({count}): {out} token(s) are out on {len(self._shards)} PS "
                "tasks, and a collect of some of them would wait on one PS's queue while "
                "another's records came first. Fix: collect all of them, or give the "
                "carriers ps_devices of one PS task.")
        counts = np.bincount(self._ps_of, weights=self._out,
                             minlength=len(self._shards)).astype(np.int64)
        if len(self._shards) == 1:
            counts[0] = count
        with self._lock:  # the guard words it only if the bound passes (O(N) to word)
            self._deadline = (time.monotonic() + timeout_s, count, timeout_s,
                              np.flatnonzero(self._out))
        try:
            # On an executor of its own: a dequeue blocking on the default one keeps every
            # closure from ending, the carriers' own (tfcompat.coordinator.own_executor).
            with tfcompat.coordinator.own_executor():
                parts = [shard.done.dequeue_many(int(k))
                         for shard, k in zip(self._shards, counts) if k]
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError) as e:
            self.abort(CarrierError(f"Carriers.collect: the done queue was closed "
                                    f"({e.message})"))  # no-op after the guard's abort
            self.wait_ended(self.end_timeout_s)
            raise self._error from None
        finally:
            with self._lock:
                self._deadline = None
        values = [np.concatenate([part[i].numpy() for part in parts])
                  for i in range(len(parts[0]))]
        lanes = values[0]
        np.subtract.at(self._out, lanes, 1)
        outputs = tf.nest.pack_sequence_as(self.signature, values[4:])
        return DoneRecords(lanes, values[1], values[2], values[3], outputs)

    def stop(self, timeout_s: float) -> np.ndarray:
        """Ends every carrier (a stop token to each lane; a step under way ends first; done
        records not collected are dropped) and returns how many steps each ran, by lane."""
        self._raise_if_stopped()
        self._stopping = True
        self._release_for(tuple(range(self.num_lanes)))(
            tf.fill([self.num_lanes], tf.constant(STOP, tf.int64)))
        running = self.wait_ended(timeout_s)
        if running:
            self.abort(CarrierError(
                f"Carriers.stop: the carriers of {self._lanes_text(running)} did not end "
                f"within {timeout_s:g} s of their stop token: a step is still running. Fix: "
                "give the step a bound of its own, or a longer timeout."))
            raise self._error
        self._out[:] = 0
        return np.array([int(r.fetch()) for r in self._results], np.int64)

    def wait_ended(self, timeout_s: float) -> list[int]:
        """Waits at most ``timeout_s`` for every carrier to end; returns the lanes whose
        carrier still runs (after an abort: a step that has not returned)."""
        bound = time.monotonic() + timeout_s
        return [lane for lane, r in enumerate(self._results)
                if not tfcompat.coordinator.remote_value_ready(r).wait(
                    max(0.0, bound - time.monotonic()))]

    def abort(self, error: CarrierError) -> None:
        """Stops the carriers with ``error``, kept and made the fit's error (the coordinator's
        next ``schedule`` or ``join`` raises it: :func:`~.errors.fail_fit`), and closes every
        queue, which ends each blocked dequeue with an error: the chief's collect and each
        carrier's wait for a token."""
        with self._lock:
            if self._error is not None:
                return
            self._error = error
        fail_fit(self.coordinator, error)
        for attempt in range(3):
            try:
                self._close_fn()
                return
            except tf.errors.OpError as e:
                # Measured: the first eager op after another thread's op on these queues
                # failed may raise that op's error (a carrier's dequeue of a closed queue),
                # not its own. Closing a closed queue is harmless: try again.
                if attempt == 2:
                    logging.getLogger("tf_hetero").warning(
                        "Carriers.abort: closing the queues failed (%s); a carrier still "
                        "waiting for a token will end only when its worker does.", _brief(e))

    # ----------------------------------------------------------------- internals
    def _raise_if_stopped(self) -> None:
        if self._error is not None:
            raise self._error
        if self._stopping:
            raise ValueError("Carriers: stop() was called; start new carriers.")

    def _lanes_text(self, lanes, shown: int = 8) -> str:
        """``"lanes [0, 1] (workers [4, 5])"``, the first ``shown`` of many and their count."""
        lanes = [int(lane) for lane in lanes]
        more = f" and {len(lanes) - shown} more" if len(lanes) > shown else ""
        return (f"lanes {lanes[:shown]}{more} (workers "
                f"{[self.workers[i] for i in lanes[:shown]]}{more})")

    def _place(self, lane: int) -> tuple:
        """Lane ``lane``'s shard and its place among the shard's lanes (lanes p, p + P, ...)."""
        return self._shards[self._ps_of[lane]], lane // len(self._shards)

    def _release_for(self, lanes: tuple):
        """The function enqueueing one token to each of ``lanes`` (traced once per set of
        lanes released together: a fit's rounds use one or a few), each on its lane's PS.
        The enqueues are unrolled on the captured queues: a ``tf.range`` loop gathering each
        lane's handle took 16 ms a round on the PS at 4 lanes, 8 ms of it the chief's CPU."""
        fn = self._releases.get(lanes)
        if fn is None:
            queues = [(shard.device, shard.token_queues[slot])
                      for shard, slot in map(self._place, lanes)]

            @tf.function(input_signature=[tf.TensorSpec([len(lanes)], tf.int64)])
            def fn(tokens):
                for k, (device, queue) in enumerate(queues):
                    with tf.device(device):
                        queue.enqueue(tokens[k])

            self._releases[lanes] = fn
        return fn

    def _carrier_fn(self, shard, lane, slot, handles, *args):
        with tf.device(shard.device):
            queue = tf.gather(handles, slot)
        steps = tf.constant(0, tf.int64)
        while tf.constant(True):
            # One iteration at a time, the next dequeue after this step's done record: by
            # default a loop's next iteration starts early, and its dequeue, pending on the
            # PS, kept a failed step's function from ending (its closure hung).
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            with tf.control_dependencies([steps]):
                token = tf.raw_ops.QueueDequeueV2(handle=queue, component_types=[tf.int64])[0]
            if token == STOP:
                break
            # Every op of the step after the dequeue: a read of the model before its token
            # would see the weights before the last round's apply. (The break above orders
            # them already: what follows it runs in a cond on the token. Measured: the
            # exactness test passes without this dependency, the step a function or not.)
            with tf.control_dependencies([token]):
                started = tf.timestamp()
                outputs = self._step(token, *args)
            flat = [tf.convert_to_tensor(o) for o in tf.nest.flatten(outputs)]
            with tf.control_dependencies(flat):
                ended = tf.timestamp()
            with tf.device(shard.device):
                pushed = shard.done.enqueue([lane, token, started, ended] + flat)
            with tf.control_dependencies([pushed]):
                steps = steps + 1
        return steps

    def check(self) -> bool:
        """The guard's look (every ``poll_s``): aborts when the collect under way is past its
        bound or a carrier ended unasked. False once there is nothing left to guard."""
        if self._error is not None or self._stopping:
            return False
        with self._lock:
            deadline = self._deadline
        if deadline is not None and time.monotonic() > deadline[0]:
            _, count, timeout_s, lanes = deadline
            self.abort(CarrierError(
                f"Carriers.collect: no {count} done record(s) of {self._lanes_text(lanes)} "
                f"within {timeout_s:g} s. Fix: check that those workers run; raise the bound "
                "for very long steps."))
            return False
        ended = []  # (lane, why, cancelled) of each carrier that ended
        for lane, result in enumerate(self._results):
            if tfcompat.coordinator.remote_value_ready(result).is_set():
                try:
                    result.fetch()
                    ended.append((lane, "it returned", False))
                except Exception as e:  # pylint: disable=broad-except
                    ended.append((lane, f"{type(e).__name__}: {_brief(e)}",
                                  isinstance(e, tf.errors.CancelledError)))
        if ended and not self._stopping:
            # The cause first: a failing closure makes TF cancel the others' (CancelledError).
            lane, why, _ = min(ended, key=lambda e: e[2])
            self.abort(CarrierError(
                f"Carriers: the carrier of lane {lane} (worker {self.workers[lane]}) "
                f"ended before it was stopped ({why})."))
            return False
        return True


def _brief(error: BaseException) -> str:
    """A TF error's own message, without the trace of where its op was defined (TF puts it
    first: "Graph execution error: Detected at node ... defined at (most recent call
    last): File ..."), the node names and the RPC details.

    >>> _brief(ValueError("Graph execution error:\\n\\nDetected at node a defined at:\\n"
    ...                   "  File \\"x.py\\", line 1, in f\\n\\nassertion failed: [x]\\n"
    ...                   "\\t [[{{node a}}]]\\nAdditional GRPC error information: ..."))
    'assertion failed: [x]'
    """
    lines = str(getattr(error, "message", error)).splitlines()
    files = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    kept = [line.strip() for line in lines[files[-1] + 1 if files else 0:]]
    kept = [line for line in kept if line and not line.startswith(
        ("[[", "Additional GRPC", ":UNKNOWN", "Graph execution error"))]
    return " ".join(kept) or type(error).__name__


def _guard_loop(ref) -> None:
    """The guard thread: holds the carriers weakly (a dropped launch ends its guard)."""
    while True:
        carriers = ref()
        if carriers is None or not carriers.check():
            return
        poll = carriers.poll_s
        del carriers
        time.sleep(poll)


class _Shard:
    """One PS task's part of the carriers: its lanes' token queues (their handles stacked,
    for a carrier to gather its own) and the done queue its lanes' carriers fill."""

    def __init__(self, device: str, lanes: Iterable[int], signature):
        self.device, self.lanes = device, list(lanes)
        specs = tf.nest.flatten(signature)
        with tf.device(device):
            self.token_queues = [tf.queue.FIFOQueue(_TOKEN_CAPACITY, [tf.int64], [[]])
                                 for _ in self.lanes]
            self.done = tf.queue.FIFOQueue(
                _TOKEN_CAPACITY * len(self.lanes), [tf.int64, tf.int64, tf.float64, tf.float64]
                + [s.dtype for s in specs], [[], [], [], []] + [s.shape for s in specs])
            self.handles = tf.stack([q.queue_ref for q in self.token_queues])


def _close_function(shards):
    """``close()``: closes every shard's done queue and token queues, cancelling pending
    enqueues (each blocked dequeue then fails); its trace does not grow with the lanes."""

    @tf.function(input_signature=[])
    def close():
        for shard in shards:
            with tf.device(shard.device):
                shard.done.close(cancel_pending_enqueues=True)
                handles = shard.handles
                for i in tf.range(tf.shape(handles, out_type=tf.int64)[0]):
                    tf.raw_ops.QueueCloseV2(handle=tf.gather(handles, i),
                                            cancel_pending_enqueues=True)

    return close
