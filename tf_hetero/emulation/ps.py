"""Emulated parameter servers: each PS task is a shared server with a service rate.

A profile with ``ps_mbps`` (and optionally ``ps_slow``, ``ps_interfere``; grammar in
:mod:`tf_hetero.emulation.profile`) makes every emulated training step, for each PS task it
touches, request service from that PS: an op *placed on the PS device*, inside a
``tf.CriticalSection`` created on that PS, sleeps ``bytes x us_per_byte x interference``
microseconds. ``bytes`` is what the step moves through that PS: the variables it reads from
it before computing and the gradients it pushes to it after. The critical section's mutex is
a resource on the PS, so requests from *different workers* queue for it: a PS holding more
bytes, or a slower PS, delays every step that touches it, and two workers' steps on one PS
serialize (measured in docs/PSLD.md: 4 tasks of 300 ms service on one PS from 2 workers take
1.23 s with the critical section, 0.63 s without). The sleeps run on the PS processes, so the
workers burn no CPU while they wait, as with the device emulation.

Each PS keeps counters in a variable on the PS, updated inside its critical section (so
never concurrently): bytes served, busy microseconds (service time), wait microseconds (time
requests queued for the mutex) and requests served. :meth:`EmulatedServers.totals` reads them
from the chief (one RPC per PS).

Used by :func:`tf_hetero.emulate` (every strategy, stock ``ParameterServerStrategy``
included); not meant to be called directly. On a cluster::

    tf_hetero.emulate(model, "base_ms=40;ps_mbps=2;ps_slow=1:3", strategy=strategy)
    model.fit(...)
    model._tf_hetero_device.servers.totals()   # {"bytes": [...], "busy_s": [...], ...}
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.emulation.profile import Profile
from tf_hetero.emulation.sleep import sleep_op
from tf_hetero.policies.placement import ps_index

__all__ = ["EmulatedServers", "bytes_per_ps", "num_ps"]

#: Counter slots of each PS's counter variable.
BYTES, BUSY_US, WAIT_US, REQUESTS = range(4)



def _leaves(variables):
    """Variables, with each sharded variable's shards in its place."""
    for v in variables:
        shards = getattr(v, "variables", None)  # ShardedVariable
        if isinstance(shards, (list, tuple)) and shards and shards[0] is not v:
            yield from shards
        else:
            yield v


def bytes_per_ps(variables, num_ps_tasks: int) -> list[int]:
    """Bytes of ``variables`` held by each PS task (variables on no PS are left out)."""
    out = [0] * num_ps_tasks
    for v in _leaves(map(tfcompat.keras3.tf_variable, variables)):
        p = ps_index(getattr(v, "device", ""))
        if p is not None and p < num_ps_tasks:
            out[p] += int(v.shape.num_elements() * v.dtype.size)
    return out


def num_ps(strategy) -> int:
    """PS tasks in ``strategy``'s cluster (0 for a strategy without PS tasks)."""
    # ParameterServerStrategyV2Extended counts them when it connects (pssv2 ~598); the public
    # strategy.cluster_resolver is None for it.
    return tfcompat.strategy.num_ps(strategy)


class EmulatedServers:
    """One shared server per PS task: a critical section and counters on the PS device.

    Build it eagerly, after the strategy connected to the cluster (``tf_hetero.emulate`` does).
    """

    def __init__(self, profile: Profile, num_ps_tasks: int):
        self.profile = profile
        self.num_ps = num_ps_tasks
        self.us_per_byte = profile.ps_us_per_byte(num_ps_tasks)  # checks the PS indices
        self.devices = [f"/job:ps/replica:0/task:{p}/device:CPU:0" for p in range(num_ps_tasks)]
        #: Bytes one step reads from / pushes to each PS (set when a step is traced).
        self.read_bytes: list[int] = [0] * num_ps_tasks
        self.push_bytes: list[int] = [0] * num_ps_tasks
        self._sections, self._counters = [], []
        for device in self.devices:
            with tf.init_scope(), tf.device(device):
                self._sections.append(tf.CriticalSection(name="tf_hetero_ps_server"))
                # Made directly, the class bypasses variable creator scopes (VariableMetaclass
                # runs them for tf.Variable only): a PS counter is never placed by the
                # strategy's round-robin and never counted in its placement.
                self._counters.append(tfcompat.ops.ResourceVariable(
                    tf.zeros([4], tf.int64), trainable=False, name="tf_hetero_ps_counters"))

    def _factor(self, p: int, now: tf.Tensor) -> tf.Tensor:
        """Interference factor of PS ``p`` at wall time ``now`` (seconds, float64)."""
        factor = tf.constant(1.0, tf.float64)
        for i in self.profile.ps_interfere:
            if i.ps == p:
                on = tf.math.floormod(now, i.period_s) < i.on_s
                factor *= tf.where(on, tf.constant(i.factor, tf.float64), 1.0)
        return factor

    def _service(self, p: int, num_bytes, requested: tf.Tensor, counted: bool = True):
        """Runs on PS ``p`` inside its critical section (one request at a time): sleeps the
        service time of ``num_bytes``; returns ``(end, busy seconds)``. ``counted``: add to
        the PS's counters (every step's request; a probe's is not)."""
        with tf.device(self.devices[p]):
            got = tf.timestamp()
            us = tf.cast(tf.round(tf.cast(num_bytes, tf.float64) * self.us_per_byte[p]
                                  * self._factor(p, got)), tf.int64)
            slept = sleep_op(us)
            with tf.control_dependencies([slept]):
                done = tf.timestamp()
            if not counted:
                return done, done - got
            busy = tf.cast((done - got) * 1e6, tf.int64)  # done is after the sleep
            # requested is an input of this body, so CriticalSection orders the lock after
            # it: wait = queueing for the mutex, measured on one clock.
            wait = tf.maximum(tf.cast((got - requested) * 1e6, tf.int64), 0)
            update = self._counters[p].assign_add(
                tf.stack([tf.constant(int(num_bytes), tf.int64), busy, wait,
                          tf.constant(1, tf.int64)]))
            with tf.control_dependencies([update]):
                return tf.identity(done), done - got

    def serve(self, p: int, num_bytes: int, after=()) -> tf.Tensor | None:
        """In a traced step: PS ``p`` serves ``num_bytes`` once ``after`` ran; returns the
        end of the service (wait it on the step's path). ``None`` if there is nothing to do."""
        if num_bytes <= 0 or not self.us_per_byte[p]:
            return None

        def request():
            requested = tf.timestamp()
            with tf.device(self.devices[p]):
                return self._sections[p].execute(
                    lambda: self._service(p, num_bytes, requested)[0])

        # The request is a function of its own. Its call op takes this PS's mutex and
        # counters, so tf.function's automatic control dependencies order it only with the
        # step's other requests to this PS. Built inline, its stateful ops that take no
        # resource (the timestamps, ConsumeMutexLock, the sleep's iterator) would join the
        # program-order chain of every such op in the step, and a step's requests to two PS
        # tasks would run one after the other (docs/TF_INTERNALS.md section 9).
        with tf.control_dependencies(list(after)):
            return tf.function(request)()

    def probe(self, sizes: tuple[int, int] = (1024, 65536), repeats: int = 3) -> list[tuple]:
        """Measures each PS's service: ``(seconds per byte, seconds per request)`` per PS
        (``None`` for a PS the profile does not emulate), from requests of two ``sizes``
        timed on the PS (the fastest of ``repeats`` at each size; the line through them).

        Run eagerly from the chief between steps (a round boundary, or before the first
        round): each request takes the PS's mutex like a step's and is kept out of the
        counters, so the per-PS load telemetry counts training only. Every PS serves its
        requests at once (one function; each PS's request a function of its own, as in
        :meth:`serve`), so the probe costs ``repeats x`` both sizes' service on the slowest
        PS (~0.2 s with a 64 KB request on a 4 MB/s PS 3x slow, ~0.1 s more the first time:
        the trace). A PS under interference at that moment looks slower: the controller's
        later windows measure again (docs/PSLD.md section 4).
        """
        small, large = sizes
        if not 0 < small < large:
            raise ValueError(f"EmulatedServers.probe(sizes={sizes!r}): need 0 < small < large.")
        emulated = [p for p in range(self.num_ps) if self.us_per_byte[p]]
        if not emulated:
            return [None] * self.num_ps

        def request(p, num_bytes):
            with tf.device(self.devices[p]):
                return self._sections[p].execute(
                    lambda: self._service(p, num_bytes, None, counted=False)[1])

        @tf.function
        def timed(num_bytes):
            return tf.stack([tf.function(functools.partial(request, p))(num_bytes)
                             for p in emulated])

        best = {}
        for size in (small, large) * repeats:
            seconds = timed(tf.constant(size, tf.int64)).numpy()
            best[size] = np.minimum(best.get(size, seconds), seconds)
        out = [None] * self.num_ps
        for i, p in enumerate(emulated):
            per_byte = max(float(best[large][i] - best[small][i]) / (large - small), 0.0)
            out[p] = (per_byte, max(float(best[small][i]) - small * per_byte, 0.0))
        return out

    def serve_all(self, per_ps: list[int], after=()) -> list[tf.Tensor]:
        """Every PS serves its share of a step at once (requests in parallel, as a step's
        reads and pushes to different PS tasks are); the ends of the services."""
        out = [self.serve(p, n, after) for p, n in enumerate(per_ps)]
        return [t for t in out if t is not None]

    def totals(self) -> dict:
        """Counters of every PS since the start (read from the PS tasks)::

            {"bytes": [...], "busy_s": [...], "wait_s": [...], "requests": [...]}
        """
        values = [c.numpy() for c in self._counters]
        return {"bytes": [int(v[BYTES]) for v in values],
                "busy_s": [float(v[BUSY_US]) / 1e6 for v in values],
                "wait_s": [float(v[WAIT_US]) / 1e6 for v in values],
                "requests": [int(v[REQUESTS]) for v in values]}
