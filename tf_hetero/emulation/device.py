"""Emulated device time: make each worker's training step take as long as its profile says.

:func:`emulate` wraps ``model.train_step`` so that every step, on the worker that runs it,
lasts at least ``profile.base_ms * slowdown(worker, task)`` milliseconds:

1. a timestamp is taken when the step starts;
2. the real step runs (forward, backward);
3. the step sleeps for whatever is left of its emulated device time *before* an optimizer
   update it applies itself (stock PSS, ASP): on a real device the compute is the device
   time, so the update lands at the end of the step, and a step's staleness counts the
   updates of every step that overlapped it. A step whose update a round applies (it writes
   accumulators or buffers) sleeps at its end instead: its round applies after it anyway.

The sleep is an op *inside* the worker's step function (a one-element ``SleepDataset`` built
and drained in the step), so input prefetching cannot hide it, and a sleeping worker burns no
CPU: four to eight emulated devices behave like separate machines even on two cores. The
step's real compute counts toward its emulated time, so measured task-time ratios match the
configured ones as long as ``base_ms`` exceeds the real step time (~10-30 ms here).

The worker's task counter (``t`` in :mod:`tf_hetero.emulation.profile`) is a per-worker variable, so
transient stragglers and step changes follow each worker's own task sequence.

With ``ps_mbps`` in the profile the PS tasks are emulated too (:mod:`tf_hetero.emulation.ps`):
before computing, the step waits until every PS it reads from has served those bytes, and after
its device time it waits until every PS it pushes to has served the gradient, each PS one
request at a time (a shared server). The device budget starts after the reads are served, so
PS service and queueing add to the step's time instead of being absorbed by its sleep.

Example (on a cluster; see :class:`tf_hetero.LocalCluster`)::

    with strategy.scope():
        model = tf_hetero.models.mlp()
        model.compile("sgd", "sparse_categorical_crossentropy")
    tf_hetero.emulate(model, "slow=3:4", strategy=strategy)   # worker 3 is 4x slower
    model.fit(dataset_fn, epochs=1, steps_per_epoch=50)
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import tensorflow as tf

from tf_hetero import hooks, tfcompat
from tf_hetero.emulation.profile import Profile, ProfileError
from tf_hetero.emulation.ps import EmulatedServers, bytes_per_ps, num_ps
from tf_hetero.emulation.sleep import sleep_op

__all__ = ["emulate", "EmulatedDevice", "finish_compute", "keep_gradient_local", "STAMP_COLUMNS"]

#: A step's row in :meth:`EmulatedDevice.stamps_per_worker`: its first op, its real work done
#: (before its closing sleep), the end of its emulated device time (``time.time()`` seconds,
#: the workers' clock), and the device time its profile gave it (seconds).
STAMP_COLUMNS = ("first_op", "work_done", "device_end", "budget_s")

_trace = threading.local()  # the emulated step being traced: (start, budget_us, sleeps, flags)


def finish_compute(after, extra_us=0) -> "tf.Tensor | None":
    """In a step traced under :func:`emulate`: sleeps what is left of the step's emulated
    device time (plus ``extra_us``) once ``after`` (tensors) is computed, and returns that
    sleep (``None`` outside an emulated step). Work that must follow the emulated compute,
    such as a push over an emulated link, depends on it; the step's own closing sleep then
    finds its time spent."""
    step = getattr(_trace, "step", None)
    if step is None:
        return None
    start, budget_us, sleeps, _ = step
    with tf.control_dependencies(list(after)):
        elapsed_us = tf.cast((tf.timestamp() - start) * 1e6, tf.int64)
        slept = sleep_op(tf.maximum(budget_us + extra_us - elapsed_us, 0))
    sleeps.append(slept)
    return slept


class EmulatedDevice:
    """The per-worker state and in-graph formula of a :class:`~tf_hetero.emulation.profile.Profile`.

    Create it under ``strategy.scope()`` (it owns a per-worker task counter).
    """

    def __init__(self, profile: Profile, num_workers: int, batch_size: int | None = None,
                 strategy=None, servers=None, stamps: int = 0):
        self.profile = profile
        #: :class:`tf_hetero.emulation.ps.EmulatedServers` (profile ``ps_mbps``), or None.
        self.servers = servers
        self.num_workers = num_workers
        # base_ms is the time of one batch of this many samples; a step over more or fewer
        # rows (a sized task) takes proportionally longer or shorter, as on real hardware.
        # None: the strategy's dataset batch if it knows it (sized strategies), else every
        # step takes base_ms whatever its rows.
        self.batch_size = batch_size
        self.strategy = strategy
        # Emulated worker<->PS link, microseconds per byte per worker (0: a free network).
        link = profile.link_us_per_byte(num_workers) if profile.link_mbps else (0.0,) * num_workers
        self._link_us_per_byte = tf.constant(link, tf.float64)
        self.emulated_link = any(link)
        const = np.asarray(profile.constant_slowdowns(num_workers), np.float64)
        change_at, change_factor = profile.change_vectors(num_workers)
        self._const = tf.constant(const, tf.float64)
        self._change_at = tf.constant(change_at, tf.int64)
        self._change_factor = tf.constant(change_factor, tf.float64)
        self._straggle = tf.constant(profile.straggle_table(num_workers), tf.float64)
        # One counter per worker: the worker's own task index t.
        self.task_counter = tf.Variable(
            tf.constant(0, tf.int64), trainable=False, name="tf_hetero_task_counter",
            per_worker_variable=True, aggregation=tf.VariableAggregation.NONE)
        # Emulated microseconds each worker's steps were given (device time and link), added
        # once the step's closing sleep ran: what the profile asked of each worker, exactly,
        # for checks that must not depend on the machine's load (tests assert no wall times).
        self.budget_counter = tf.Variable(
            tf.constant(0, tf.int64), trainable=False, name="tf_hetero_budget_us",
            per_worker_variable=True, aggregation=tf.VariableAggregation.NONE)
        # How long the worker's last own optimizer update took (us): the next step's update
        # starts twice that before the end of its device time, so that it lands near the end
        # and the step still lasts its device time (_update_after_compute).
        self.update_us = tf.Variable(
            tf.constant(0, tf.int64), trainable=False, name="tf_hetero_update_us",
            per_worker_variable=True, aggregation=tf.VariableAggregation.NONE)
        # With stamps > 0, each step's timestamps in a per-worker ring of that many rows
        # (STAMP_COLUMNS), read once after a fit (stamps_per_worker): where a task's time
        # goes on the worker, for tf_hetero.telemetry.roundprofile. Off by default: it is one
        # more op per step, and a row's profile is only worth it when asked for.
        self.stamps = None
        if stamps:
            self.stamps = tf.Variable(
                tf.zeros([int(stamps), len(STAMP_COLUMNS)], tf.float64), trainable=False,
                name="tf_hetero_step_stamps", per_worker_variable=True,
                aggregation=tf.VariableAggregation.NONE)

    def device_microseconds(self) -> tf.Tensor:
        """Emulated time of the current task on the current worker; advances its counter."""
        return self._next_task()[1]

    def _next_task(self) -> tuple:
        """``(t, microseconds)``: the current worker's task index and emulated time; advances
        its counter."""
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        t = self.task_counter.assign_add(1) - 1
        base = tf.where(t >= self._change_at[w], self._change_factor[w], self._const[w])
        factor = base * self._straggle[w, t % self.profile.horizon]
        return t, tf.cast(factor * self.profile.base_ms * 1000.0, tf.int64)

    def stamps_per_worker(self) -> list:
        """Each worker's step timestamps (``time.time()`` seconds; rows of
        :data:`STAMP_COLUMNS`, oldest first, the ring's last ``stamps`` steps), read from the
        workers; ``[]`` without stamps."""
        if self.stamps is None:
            return []
        out = []
        for ring in self.stamps.read_all():
            rows = np.asarray(ring.numpy() if hasattr(ring, "numpy") else ring)
            rows = rows[rows[:, 0] > 0]  # rows no step has written yet
            out.append(rows[np.argsort(rows[:, 0], kind="stable")])
        return out

    def _scaled(self, budget_us, data):
        reference = self.batch_size or getattr(self.strategy, "dataset_batch", None)
        if not reference:
            return budget_us
        rows = tf.shape(tf.nest.flatten(data)[0], out_type=tf.int64)[0]
        return tf.cast(tf.round(tf.cast(budget_us, tf.float64) * tf.cast(rows, tf.float64)
                                / float(reference)), tf.int64)

    def tasks_per_worker(self) -> list[int]:
        """How many tasks each worker has run (read from the workers)."""
        return [int(v.numpy()) for v in self.task_counter.read_all()]

    def budget_ms_per_task(self) -> list[float | None]:
        """Emulated milliseconds each worker's steps were given, on average per step (device
        time and emulated link time; read from the workers; ``None`` for a worker that ran
        none). Each step lasted at least its own: the sleep that pads a step to its budget
        ran before the count."""
        totals = [float(v.numpy()) / 1e3 for v in self.budget_counter.read_all()]
        return [b / t if t else None for b, t in zip(totals, self.tasks_per_worker())]

    def link_microseconds(self, num_bytes: int) -> tf.Tensor:
        """Time ``num_bytes`` take on the current worker's emulated link (int64 us)."""
        w = tf.distribute.coordinator.experimental_get_current_worker_index()
        return tf.cast(tf.round(self._link_us_per_byte[w] * float(num_bytes)), tf.int64)

    def wrap(self, step_fn, model=None):
        """Wraps a ``train_step(data)`` so it lasts its emulated time on the worker: device
        time, plus, over an emulated link (profile ``link=``), the time its variable reads
        and its gradient push take on the worker's link.

        Every strategy pays the same link (docs/MEASUREMENT.md): a step reads every variable
        of ``model`` from the PS before it computes, and pushes one gradient per trainable
        variable after, unless the step keeps its gradient on the worker (H-PS local
        accumulation, :func:`keep_gradient_local`), whose pushes pay the link where they
        happen instead. The link time is added in series with the device time: a step
        cannot compute before its weights arrived, nor send its gradient before computing.
        """
        model = model if model is not None else getattr(step_fn, "__self__", None)

        servers = self.servers if model is not None else None

        def emulated_step(data):
            start = first = tf.timestamp()
            if servers is not None:
                servers.read_bytes = bytes_per_ps(model.variables, servers.num_ps)
                served = servers.serve_all(servers.read_bytes, after=[start])
                if served:  # the device budget starts once the weights were served
                    with tf.control_dependencies(served):
                        start = tf.timestamp()
            with tf.control_dependencies([start]):
                data = tf.nest.map_structure(tf.identity, data)
            t, budget_us = self._next_task()
            budget_us = self._scaled(budget_us, data)
            if self.emulated_link and model is not None:
                budget_us += self.link_microseconds(_bytes(model.variables))
            sleeps = []  # made by finish_compute() while step_fn is traced
            # local: set by keep_gradient_local(); pushed: the step's own update waited for
            # its push (_update_after_compute), so the closing push below is not charged again
            flags = {"local": False, "pushed": False}
            with _tracing(start, budget_us, sleeps, flags), \
                    _update_after_compute(self, model, flags):
                logs = step_fn(data)
            if self.emulated_link and model is not None and not flags["local"]:
                budget_us += self.link_microseconds(_bytes(model.trainable_variables))
            graph = tf.compat.v1.get_default_graph()
            # After an early sleep, not beside it: two sleeps at once would hold two of the
            # worker's inter-op threads (measured: a fifth of the tasks ran ~60% long).
            spent = [s for s in sleeps if getattr(s, "graph", None) is graph]
            with tf.control_dependencies(tf.nest.flatten(logs) + spent):
                done = tf.timestamp()
                elapsed_us = tf.cast((done - start) * 1e6, tf.int64)
                slept = sleep_op(tf.maximum(budget_us - elapsed_us, 0))
            with tf.control_dependencies([slept]):
                counted = self.budget_counter.assign_add(budget_us)
                if self.stamps is not None:
                    row = tf.stack([first, done, tf.timestamp(),
                                    tf.cast(budget_us, tf.float64) / 1e6])
                    counted = [counted, self.stamps.scatter_nd_update(
                        [[t % self.stamps.shape[0]]], [row])]
            pushed = []
            if servers is not None and not flags["local"] and not flags["pushed"]:
                servers.push_bytes = bytes_per_ps(model.trainable_variables, servers.num_ps)
                pushed = servers.serve_all(servers.push_bytes, after=[slept])
            with tf.control_dependencies([slept] + tf.nest.flatten(counted) + pushed):
                return tf.nest.map_structure(tf.identity, logs)

        return emulated_step


#: Marks an ``apply_gradients`` that does not update the variables (a round strategy's step
#: writes accumulators; its round applies later): the emulation leaves its timing alone.
DEFERS_UPDATE = hooks.DEFERS_UPDATE


@contextlib.contextmanager
def _update_after_compute(device, model, flags):
    """While a step is traced: an optimizer update the step applies itself waits for the
    step's emulated device time (and, over an emulated link, its push; with emulated PS
    tasks, their service of the push), so it lands at the end of the step as on a device
    whose compute is the device time. It starts twice as long before that end as the
    worker's previous update took (``EmulatedDevice.update_us``), so the step still lasts
    its device time, as before, and task-time ratios stay the profile's. Shadows
    ``apply_gradients`` on the optimizer instance (not the class: a trace may run in a
    replica thread of its own, and other models' steps must not see it). Run before the
    sleep instead, within the step's first ~10-30 ms of real work, the update made
    asynchronous steps (stock PSS, ASP) see almost none of the other workers' updates as
    staleness (docs/decisions/0001-async-updates-land-at-the-end-of-device-time.md)."""
    optimizer = getattr(model, "optimizer", None) if model is not None else None
    if optimizer is None or not callable(getattr(type(optimizer), "apply_gradients", None)) \
            or "apply_gradients" in vars(optimizer):
        yield
        return

    def apply_gradients(grads_and_vars, *args, **kwargs):
        method = type(optimizer).apply_gradients
        grads_and_vars = list(grads_and_vars)
        grads = [g for g, _ in grads_and_vars if g is not None]
        # A round strategy's interception (strategies/runtime/intercept.py) replaces
        # tf_keras's apply_gradients, or, for Keras 3, the `apply` its apply_gradients calls.
        defers = getattr(method, DEFERS_UPDATE, False) or getattr(
            getattr(type(optimizer), "apply", None), DEFERS_UPDATE, False)
        if defers or not grads:
            return method(optimizer, grads_and_vars, *args, **kwargs)
        push_us = 0
        if device.emulated_link:
            push_us = device.link_microseconds(_bytes([v for g, v in grads_and_vars
                                                       if g is not None]))
        # Twice the last update's time: an update that runs longer than the last one would
        # stretch the step past its device time (a bias: steps only ever get longer), one
        # that starts early is padded by the closing sleep. So it lands within about one
        # update's time (a few ms) of the end of the device time.
        lead_us = 2 * device.update_us.read_value()
        slept = finish_compute(tf.nest.flatten(grads, expand_composites=True),
                               push_us - lead_us)
        if slept is None:
            return method(optimizer, grads_and_vars, *args, **kwargs)
        ready = [slept]
        servers = device.servers
        if servers is not None:
            servers.push_bytes = bytes_per_ps(model.trainable_variables, servers.num_ps)
            ready += servers.serve_all(servers.push_bytes, after=[slept])
            flags["pushed"] = True
        with tf.control_dependencies(ready):
            began = tf.timestamp()
            grads_and_vars = [
                (g if g is None else tf.nest.map_structure(tf.identity, g,
                                                           expand_composites=True), v)
                for g, v in grads_and_vars]
        graph = tf.compat.v1.get_default_graph()
        before = len(graph.get_operations())
        result = method(optimizer, grads_and_vars, *args, **kwargs)
        # Timed to the end of the update's writes (the result, e.g. `iterations`, may be
        # read before them: different resources are not ordered).
        writes = [op for op in graph.get_operations()[before:] if _writes_state(op)]
        done = [r for r in tf.nest.flatten(result) if r is not None]
        with tf.control_dependencies(writes + done + [began]):
            took = tf.cast((tf.timestamp() - began) * 1e6, tf.int64)
            recorded = device.update_us.assign(tf.maximum(took, 0))
        _, _, sleeps, _ = _trace.step
        sleeps.append(recorded)  # the step's closing sleep waits for it, as for its sleeps
        return result

    optimizer.apply_gradients = apply_gradients  # the instance's attribute hides the class's
    try:
        yield
    finally:
        try:
            del optimizer.apply_gradients
        except AttributeError:
            pass


def _writes_state(op) -> bool:
    """Does ``op`` write a variable (or call a function that may)?"""
    return (op.type in ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")
            or op.type.startswith(("ResourceApply", "ResourceSparseApply", "ResourceScatter"))
            or op.type in ("StatefulPartitionedCall", "PartitionedCall"))


def keep_gradient_local() -> None:
    """Called while a step is traced under :func:`emulate`: this step's gradient stays on its
    worker (no per-step push over the emulated link; H-PS buffers)."""
    step = getattr(_trace, "step", None)
    if step is not None:
        step[3]["local"] = True


class _EmulatedStepHooks(hooks.StepHooks):
    """The emulator's answers to a step being traced (:mod:`tf_hetero.hooks`)."""

    def finish_compute(self, after, extra_us=0):
        return finish_compute(after, extra_us)

    def keep_gradient_local(self) -> None:
        keep_gradient_local()


_STEP_HOOKS = _EmulatedStepHooks()


def _bytes(variables) -> int:
    return tfcompat.keras3.nbytes(variables)


@contextlib.contextmanager
def _tracing(start, budget_us, sleeps, flags):
    previous = getattr(_trace, "step", None)
    _trace.step = (start, budget_us, sleeps, flags)
    try:
        yield
    finally:
        _trace.step = previous


def emulate(model, profile=None, *, strategy=None, num_workers: int | None = None,
            batch_size: int | None = None, stamps: int = 0):
    """Makes ``model``'s training steps take the profile's emulated device time.

    Args:
      model: a compiled or uncompiled tf_keras or Keras 3 model built under
        ``strategy.scope()``.
      profile: a :class:`Profile`, an inline spec, a JSON path, or ``None`` for the profile
        that ``tf-hetero run --profile`` exported (``TF_HETERO_PROFILE``); uniform if unset.
      strategy: the strategy the model trains under (defaults to the current one); its
        cluster gives the number of workers.
      num_workers: overrides the worker count read from the strategy.
      batch_size: samples whose step takes the profile's ``base_ms``; a step over ``r`` rows
        takes ``base_ms x r / batch_size`` (sized tasks of per-worker batch-size strategies
        process more or fewer rows). Default: the strategy's dataset batch when it re-batches
        the data (sized strategies), else ``base_ms`` per step.
      stamps: keep the timestamps of each worker's last ``stamps`` steps
        (:meth:`EmulatedDevice.stamps_per_worker`; 0: none), for a round profile
        (:mod:`tf_hetero.telemetry.roundprofile`).

    Returns:
      The :class:`EmulatedDevice` (its ``tasks_per_worker()`` counts tasks per worker).
    """
    profile = Profile.from_env() if profile is None else Profile.parse(profile)
    if (profile.emulates_ps or profile.link_mbps) and not model.built:
        # A step's reads and pushes are sized from the model's variables when it is traced,
        # before the model's first call would create them (TF's error said only that the
        # weights were not created, from inside the trace).
        raise ProfileError(
            f"tf_hetero.emulate: profile {profile.spec()!r} emulates PS tasks or a link "
            f"(ps_mbps, link), whose service is sized from the variables of model "
            f"{model.name!r}, which has none yet. Fix: build the model before emulate (an "
            "Input layer, input_shape= on its first layer, or model.build(input_shape)).")
    strategy = strategy or tf.distribute.get_strategy()
    if num_workers is None:
        num_workers = tfcompat.strategy.num_workers(strategy)
    servers = None
    if profile.emulates_ps:
        ps_tasks = num_ps(strategy)
        if ps_tasks < 1:
            raise ProfileError(
                f"Profile {profile.spec()!r} emulates PS tasks (ps_mbps) but the strategy "
                f"{type(strategy).__name__} has none. Fix: train on a cluster with PS tasks, or "
                "drop ps_mbps, ps_slow and ps_interfere.")
        servers = EmulatedServers(profile, ps_tasks)
        monitor = getattr(strategy, "monitor", None)
        if monitor is not None and hasattr(monitor, "attach_ps"):
            monitor.attach_ps(servers)
    with strategy.scope():
        device = EmulatedDevice(profile, num_workers, batch_size, strategy, servers, stamps)
    model.train_step = device.wrap(model.train_step, model)
    hooks.install_step_hooks(_STEP_HOOKS)  # a round strategy's traced steps reach them
    if profile.link_mbps or servers is not None:  # pushes outside the step (H-PS's buffers)
        from tf_hetero.emulation.push import EmulatedPush

        link = profile.link_us_per_byte(num_workers) if profile.link_mbps else None
        strategy.push_hook = EmulatedPush(link, servers)
    # A function traced before the wrap would not sleep: retrace on the next fit.
    model.train_function = None
    model._tf_hetero_device = device  # keeps the counter alive with the model
    return device
