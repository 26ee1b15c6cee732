"""PS failover inside a running ``fit`` (round strategies): an in-memory copy of every PS
variable every few applied rounds, and, when a PS task dies, its variables created again
from the copy on a standby (or surviving) PS, the survivors rolled back to the same copy,
the functions traced on the old placement traced again, and the fit going on.

Where each part runs (docs/FAILOVER.md):

- **The copy** (:meth:`Failover.after_apply`): on the apply thread, right after the apply
  of every ``every``-th round returns and before the engine books it, so no apply runs
  and (round strategies) no task of the next round has started: one function on the chief
  reads every PS variable the strategy created (``HeteroExtended.ps_variables``: model,
  optimizer slots and step counter, metrics, accumulators) into host memory.
- **Detection** (:meth:`Failover.take`): the worker thread whose closure, or the apply
  thread whose apply, fails with an ``UnavailableError`` naming a PS task hands the error
  here instead of failing the fit (the closure queue does not keep it: the instrumented
  ``mark_failed`` asks :meth:`Failover.can_take`); the recovery runs on a thread of its
  own, so the worker threads go on draining what is queued for them.
- **Recovery** (:meth:`Failover._recover`), with ``schedule`` held off (:attr:`lock`) so
  no step is made on the old placement meanwhile: the engine abandons the rounds in
  progress and gives back the steps left unfinished (:meth:`RoundEngine.restart_rounds`;
  it is not idle until :meth:`RoundEngine.resume`, so a ``join`` waits); with the apply
  thread held, each variable of the dead task is created again on the target PS from the
  copy (the wrapper kept, as a rebalancing move does) and every other one assigned its
  copied value; the placement's records and ``placement_generation`` follow (tf_keras's
  test and predict functions are made again); the traced steps and applies are dropped
  (:meth:`HeteroCoordinator.forget_traces`: a function traced before the swap still reads
  the dead task's variable) and each unfinished step is made again with the step traced
  now, its result handed to the ``RemoteValue`` ``fit`` holds for the old one. The rounds
  applied since the copy are lost, their steps not run again; the line says how many.

ASP (no engine, no round: every step applies its own update): the copy after a worker's
step and a recovery of the steps TF's queue holds, strategies/runtime/failover_asp.py.

Measured on a local multi-process cluster (benchmarks/tf_probes/ps_failover.py): a
function that meets the dead PS fails within ~20 ms; creating its variables on another PS
and tracing again lets the same coordinator and workers go on.
"""

from __future__ import annotations

import threading
import time
import weakref

import numpy as np
import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.cluster.reach import answers, call_bounded
from tf_hetero.policies import failover as policy
from tf_hetero.policies.placement import ps_index
from tf_hetero.strategies.runtime.errors import ParameterServerError, is_ps_failure
from tf_hetero.strategies.runtime.moves import ps_device
from tf_hetero.strategies.runtime.failover_asp import AsyncSteps
from tf_hetero.strategies.runtime.tags import tag_of
from tf_hetero.strategies.runtime.taskcode import NO_ROUND
from tf_hetero.tfcompat import variables as tfvars

__all__ = ["Failover"]

#: Seconds a probe of the PS tasks' liveness is reused (a death fails many closures at once).
PROBE_S = 1.0


class _Copy:
    """The PS variables' values after the apply of round ``round_id`` (``applied`` rounds
    applied by then); ASP: ``round_id`` None, ``applied`` the optimizer's step counter in
    the copy."""

    def __init__(self, round_id: int, applied: int, variables: list, values: list):
        self.round_id, self.applied = round_id, applied
        self.entries = [(weakref.ref(v), np.asarray(x)) for v, x in zip(variables, values)]
        self.ids = {id(v) for v in variables}
        self.nbytes = int(sum(x.nbytes for _, x in self.entries))


class Failover:
    """Keeps the copy and carries out failovers for one coordinator
    (``HeteroStrategy.set_failover``).

    ``events``: one dict per failover (dead and target PS, variables re-created, the
    copy's round, applied rounds rolled back, rounds abandoned, steps made again, seconds
    from detection to the fit going on); ``copies``: copies taken;
    ``copy_s``: seconds each copy took on the apply thread."""

    def __init__(self, coordinator, config: policy.FailoverConfig):
        self.coordinator = coordinator
        self.config = config
        self.strategy = coordinator.strategy
        self.engine = coordinator.engine
        self.copy: _Copy | None = None
        self.applied = 0  # rounds applied (the apply thread's count)
        self.copies = 0
        self.copy_s: list[float] = []
        self.events: list[dict] = []
        self._read_fn = None  # (key, function reading every PS variable)
        self.lost: list[int] = []  # PS tasks that died (never a target again)
        self._probed: tuple | None = None  # (when, the dead PS or None): the last probe
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._ready.set()
        #: Held by ``schedule`` while it makes and submits a step, and by a recovery: no
        #: step is made on the old placement and submitted after the recovery.
        self.lock = threading.RLock()
        #: PS tasks that died and came back (:meth:`rejoin`), in order.
        self.rejoined: list[int] = []
        #: ASP's steps (strategies/runtime/failover_asp.py); None under an engine.
        self.steps = AsyncSteps(self) if self.engine is None else None

    # ------------------------------------------------------------------ the copy
    def after_apply(self, round_id: int) -> None:
        """On the apply thread, after round ``round_id``'s apply returned (not booked yet)."""
        self.applied += 1
        if self.config.snapshot_due(self.applied) or self.copy is None:
            self.take_copy(round_id)

    def take_copy(self, round_id: int) -> None:
        t0 = time.perf_counter()
        variables = self.strategy.extended.ps_variables()
        inner = [tfvars.inner_variable(v) for v in variables]
        key = tuple(id(v) for v in inner)
        if self._read_fn is None or self._read_fn[0] != key:
            # One function: one chief -> PS exchange per PS task, not one per variable.
            self._read_fn = (key, tf.function(lambda: [v.read_value() for v in inner]))
        values = [t.numpy() for t in self._read_fn[1]()]
        counter = self.steps.counter_in(inner, values) if self.steps is not None else None
        self.copy = _Copy(round_id, self.applied if counter is None else counter, variables,
                          values)
        self.copies += 1
        self.copy_s.append(time.perf_counter() - t0)

    # ------------------------------------------------------------------ detection
    def can_take(self, error: BaseException) -> bool:
        """Whether :meth:`take` would take ``error``: with a copy to recover from, a PS
        failure naming its task, or a ``CancelledError`` while a PS task does not answer."""
        return self.copy is not None and self._dead_of(error) is not None

    def _dead_of(self, error: BaseException) -> int | None:
        """The PS task whose death ``error`` shows, or None. A closure running when a PS
        dies may fail with TF's derived ``CancelledError`` ("RemoteExecuteNode::RunAsync")
        instead of the ``UnavailableError`` naming the task (measured: SSP, the second of
        two deaths): then every PS task not yet lost is asked, one op each."""
        if is_ps_failure(error):
            return ps_index(str(error))
        if not isinstance(error, tf.errors.CancelledError):
            return None
        now = time.monotonic()
        if self._probed is not None and now - self._probed[0] < PROBE_S:
            return self._probed[1]
        return self._probe()

    def _probe(self) -> int | None:
        """Asks every PS task not yet lost, one op each: the first that does not answer."""
        dead = None
        for p in range(tfcompat.strategy.num_ps(self.strategy)):
            if p in self.lost:
                continue
            try:
                with tf.device(ps_device(p)):
                    tf.add(1, 1).numpy()
            except tf.errors.UnavailableError:
                dead = p
                break
        self._probed = (time.monotonic(), dead)
        return dead

    def check(self) -> bool:
        """Fails over a PS task that died while nothing ran (``join``, when the engine is
        idle: at an epoch's end). Nothing of the fit's meets such a death, and Keras's own
        ops on the chief, which read the metrics on the PS tasks next, would only raise it.
        Returns whether a recovery ran (it has ended when this returns). With every task
        answering, a lost PS task whose process serves again rejoins (:meth:`rejoin`)."""
        if self.copy is None:
            return False
        dead = self._probe()
        if dead is None:
            self.rejoin()
            return False
        error = tf.errors.UnavailableError(
            None, None, f"/job:ps/replica:0/task:{dead} did not answer when the fit joined")
        if not self._take_dead(dead, error):
            return False
        self.wait_ready()
        return True

    def rejoin(self) -> list[int]:
        """Lost PS tasks whose process listens again on its address (restarted) stand by
        again, targets of the next failover (and of :meth:`HeteroStrategy.scale_ps`).
        Called by :meth:`check` with nothing running: the chief's eager context is updated
        with the cluster's server def, as TF does when a worker comes back, then one op on
        each such task checks it. Only when every other task of the cluster listens too (TF's
        update waits for each task to answer: a dead worker would hold it). Returns the
        tasks that rejoined."""
        addresses = tfcompat.coordinator.task_addresses(self.coordinator)
        back = [p for p in self.lost if _listens(addresses[("ps", p)])]
        if not back:
            return []
        others = [a for (job, i), a in addresses.items() if job in ("worker", "ps")
                  and not (job == "ps" and i in self.lost)]
        if not all(_listens(a) for a in others):
            return []  # at a later join
        error = self._refresh_cluster_bounded(back)
        if error is not None:
            print(f"[tf-hetero] PS {back} listen(s) again, but the cluster could not be "
                  f"updated to reach it ({type(error).__name__}: {str(error)[:200]}); tried "
                  "again at the next epoch's end.", flush=True)
            return []
        rejoined = []
        for p in back:
            try:
                with tf.device(ps_device(p)):
                    tf.add(1, 1).numpy()
            except tf.errors.OpError:
                continue
            self.lost.remove(p)
            rejoined.append(p)
        self._probed = None
        self.rejoined.extend(rejoined)
        for p in rejoined:
            if self.strategy.monitor is not None:
                self.strategy.monitor.on_event("ps_rejoined", ps=p)
            print(f"[tf-hetero] PS {p} is back (its process restarted on its address): it "
                  "stands by for the next failover (scale_ps can make it active again).",
                  flush=True)
        return rejoined

    def _refresh_cluster_bounded(self, back: list) -> BaseException | None:
        """:func:`tfcompat.coordinator.refresh_cluster` within ``detect_s``: TF's update has
        no timeout, and a task that listens but never answers would hold ``join``. Returns
        the ``OpError`` it raised, or None; past the bound, the clear error."""
        ended, error = call_bounded(
            lambda: tfcompat.coordinator.refresh_cluster(self.coordinator),
            self.config.detect_s, "tf-hetero-rejoin")
        if not ended:
            raise ParameterServerError(
                f"PS {back} listen(s) again, but updating the cluster to reach it did not end "
                f"within {self.config.detect_s:g} s (a task that accepts connections and does "
                "not answer). Fix: restart the cluster and resume from the last checkpoint "
                "(BackupAndRestore).")
        if error is not None and not isinstance(error, tf.errors.OpError):
            raise error
        return error

    def take(self, error: BaseException) -> bool:
        """Whether the failover takes ``error`` (a closure's or an apply's): a PS failure
        with a copy to recover from. The recovery runs on its own thread; ``schedule`` and
        ``join`` wait for it."""
        if self.copy is None:
            return False
        dead = self._dead_of(error)
        return dead is not None and self._take_dead(dead, error)

    def _take_dead(self, dead: int, error: BaseException) -> bool:
        """:meth:`take` for a death already attributed to PS task ``dead``."""
        if dead in self.lost:
            # That death was failed over, and what it cancelled was made again then (the
            # closures made before carry an older generation and never get here). A
            # closure made since is no echo of it: taken, it would end unreported and
            # the fit wait for it until stall_timeout_s (chaos: a PS killed during an
            # apply). Not taken: the fit ends with the clear error.
            return False
        with self._lock:
            if not self._ready.is_set():
                return True  # one recovery at a time; this is the same death met again
            self._ready.clear()
        threading.Thread(target=self._recover, args=(dead, error), daemon=True,
                         name="tf-hetero-failover").start()
        return True

    def ready(self) -> bool:
        """No recovery is in progress."""
        return self._ready.is_set()

    def wait_ready(self) -> None:
        """Waits (bounded) for a recovery in progress; raises what made it fail."""
        if not self._ready.wait(self.config.detect_s + 60.0):
            raise ParameterServerError(
                f"tf-hetero failover: the recovery from a PS failure did not end within "
                f"{self.config.detect_s + 60:.0f} s. Fix: restart the cluster and resume from "
                "the last checkpoint (BackupAndRestore).")

    # ------------------------------------------------------------------ recovery
    def _recover(self, dead: int, error: BaseException) -> None:
        t0 = time.monotonic()
        copy = self.copy
        try:
            if not self.lock.acquire(timeout=self.config.detect_s):  # no schedule in between
                raise TimeoutError(f"fit's schedule held its lock over {self.config.detect_s} s")
            try:
                if self.engine is None:
                    moved, dst, rounds, remade, applied_before = self.steps.recover(dead, copy)
                else:
                    moved, dst, rounds, remade, applied_before = self._recover_locked(dead, copy)
            finally:
                if self.engine is not None:
                    self.engine.resume()
                self.lock.release()
            rolled_back = applied_before - copy.applied
            event = dict(dead=dead, target=dst, moved=moved, copy_round=copy.round_id,
                         rolled_back=rolled_back, abandoned=rounds, remade=remade,
                         recover_s=time.monotonic() - t0)
            self.events.append(event)
            if self.strategy.monitor is not None:
                self.strategy.monitor.on_event("ps_failover", **event)
            if self.engine is None:
                lost = (f"the copy taken at step {copy.applied} (optimizer.iterations), and "
                        f"the model rolled back to it: {_steps_lost(rolled_back)}, "
                        f"{remade} step(s) queued or running made again")
            else:
                lost = (f"the copy taken after round {copy.round_id}, and the model rolled "
                        f"back to it: {rolled_back} applied round(s) lost, {rounds} round(s) "
                        f"in progress restarted ({remade} step(s) run again)")
            print(f"[tf-hetero] PS {dead} died ({type(error).__name__}); its {moved} variables "
                  f"were created again on PS {dst} from {lost}; fit goes on "
                  f"({event['recover_s']:.2f} s).", flush=True)
        except Exception as e:  # pylint: disable=broad-except
            failure = e if isinstance(e, ParameterServerError) else ParameterServerError(
                f"tf-hetero failover from PS {dead}'s death failed: {type(e).__name__}: {e}. "
                "Fix: restart the cluster and resume from the last checkpoint "
                "(BackupAndRestore).")
            if self.engine is not None:
                self.engine.fail(failure)
            else:  # ASP: the next schedule or join raises it
                tfcompat.coordinator.queue_of(self.coordinator).fail(failure)
        finally:
            self._ready.set()

    def _recover_locked(self, dead: int, copy: _Copy) -> tuple:
        """The recovery, with ``schedule`` held off: returns the variables re-created, the
        PS they went to, the rounds abandoned, the steps made again and the applies made
        before the rollback."""
        coordinator = self.coordinator
        makers = {id(entry.accumulate_fn): fn for fn, entry in coordinator.tracer.entries.items()
                  if getattr(entry, "accumulate_fn", None) is not None}
        rounds, orphans = self.engine.restart_rounds()
        with coordinator.applier.held(self.config.detect_s):
            # Counted once no apply runs: one that was running when the PS died and
            # still landed is rolled back with the others, and counted with them.
            applied_before = self.applied
            moved, dst = self.roll_back(dead, copy)
        coordinator.forget_traces()
        again = {id(c) for c in orphans}
        for old in orphans:
            self._remake(old, makers, again)
        return moved, dst, rounds, len(orphans), applied_before

    def roll_back(self, dead: int, copy: _Copy) -> tuple[int, int]:
        """With nothing writing the PS variables: the dead task's variables created again on
        the target PS from ``copy`` and every other one set back to it, the placement and
        the queue made ready for the steps made now. Returns (variables created, target)."""
        coordinator = self.coordinator
        placement = self.strategy.extended.placement
        num_ps = tfcompat.strategy.num_ps(self.strategy)
        active = tuple(placement.active) if placement is not None else tuple(range(num_ps))
        loads = list(placement.loads) if placement is not None else [0.0] * num_ps
        dst = policy.target(dead, num_ps, active, loads, lost=self.lost)
        if dst is None:
            raise ParameterServerError(
                f"PS {dead} died and no other PS task can take its variables (the "
                f"cluster has {num_ps}). Fix: list a standby PS task in TF_CONFIG, or "
                "restart the PS and resume from the last checkpoint (BackupAndRestore).")
        try:
            moved = self._restore(copy, dead, dst, placement)
        except tf.errors.UnavailableError:
            # Measured (SSP, chaos): an op the chief had sent to the dead task failed
            # asynchronously, and the restore's first op raised that error (naming the
            # dead task, for a variable created on the target). Clear it, once, and
            # restore again: every value comes from the copy, so a repeat is safe.
            tf.experimental.async_clear_error()
            moved = self._restore(copy, dead, dst, placement)
        self.lost.append(dead)
        self._probed = None  # a probe's answer from before the recovery
        if placement is not None:
            placement.set_active(tuple(sorted({p for p in active if p != dead} | {dst})))
        self.strategy.placement_generation += 1
        self.applied = copy.applied
        queue = tfcompat.coordinator.queue_of(coordinator)
        queue.clear_error()
        # Measured (chaos, a PS killed during an overlapped apply): a closure that
        # failed on the dead task left the queue's cancellation manager cancelled,
        # and every step made with it afterwards was cancelled before it started.
        queue.renew_cancellation()
        self._rebuild_worker_state()
        return moved, dst

    def _rebuild_worker_state(self) -> None:
        """Every live worker's input iterators and local gradient buffers made again, before
        any step made now runs there (TF's own path for a worker that comes back).

        - A step that the PS's death cancelled inside its ``IteratorGetNext`` leaves its
          iterator cancelled for good: measured (chaos, a worker and a PS killed together),
          the next step on that worker ended with ``OutOfRangeError`` at
          ``IteratorGetNext`` on a dataset that repeats forever, and the fit with a
          ``RemoteValue`` left cancelled. So each live worker reads its data afresh, from
          the start of its dataset (a dead worker's are made again when it comes back).
        - An H-PS buffer holds gradients of the abandoned rounds, taken on weights the
          rollback undid: measured (pipelined H-PS), the first push after the failover
          carried them into the next apply. The engine drops those tasks
          (``LocalAccumulation.on_fail``); here the buffers restart from zero."""
        workers = tfcompat.coordinator.workers_of(self.coordinator)
        live = (set(self.engine.live_workers) if self.engine is not None else  # ASP: every
                {w.worker_index for w in workers})  # worker (a dead one's run when it is back)
        buffers = [v for b in self.coordinator.tracer.buffers for v in b.per_worker_variables]
        for worker in workers:
            if worker.worker_index in live:
                tfcompat.coordinator.rebuild_resources(worker, buffers)

    def _remake(self, old, makers: dict, again: set) -> None:
        """Submits ``old``'s step again, made with the step traced on the new placement; its
        result ends ``old``'s ``RemoteValue`` too (the one ``fit`` holds), and those of the
        steps ``old`` was to end (a step made again by an earlier failover and not run
        yet; not those in ``again``, made again themselves)."""
        coordinator = self.coordinator
        fn, args, kwargs = tag_of(old).source
        user_fn = makers.get(id(fn))
        if user_fn is None:
            raise ParameterServerError(
                "a step queued when the PS died is not a training step of this fit's rounds: "
                "it cannot be made again")
        args = tuple(args[1:])  # the task code first
        with self.strategy.scope():
            entry = coordinator.tracer.entry(user_fn, args, kwargs or {})
        coordinator.dispatcher.last_accumulators = entry.accumulators
        new = coordinator.dispatcher.task_closure(
            (entry.accumulate_fn, (coordinator.code_tensor(NO_ROUND),) + args, kwargs))
        coordinator.losses.keep(new, new.build_output_remote_value(),
                                by_round=entry.loss_in_apply)
        coordinator.losses.forget(old)
        carried, tag_of(old).echoes = tag_of(old).echoes, []
        tag_of(new).echoes.extend([e for e in carried if id(e) not in again] + [old])
        self.engine.submit(new, "round", 1)

    def _restore(self, copy: _Copy, dead: int, dst: int, placement) -> int:
        """Every variable back to its copied value; the dead task's created again on
        ``dst`` (the placement's records follow). Returns how many were created again."""
        placed = {name for name, ps, _ in placement.placed if ps == dead} if placement else ()
        moved, assigns = 0, []
        missing = [v.name for v in self.strategy.extended.ps_variables()
                   if id(v) not in copy.ids and ps_index(tfvars.inner_variable(v).device) == dead]
        if missing:
            raise ParameterServerError(
                f"PS {dead} died holding {len(missing)} variable(s) created after the last "
                f"copy ({', '.join(missing[:3])}): they cannot be recovered. Fix: resume from "
                "the last checkpoint (BackupAndRestore).")
        with tf.init_scope():
            for ref, value in copy.entries:
                var = ref()
                if var is None:
                    continue
                old = tfvars.inner_variable(var)
                if ps_index(old.device) == dead:
                    with tf.device(ps_device(dst)):
                        new = tfvars.resource_variable(value, like=old)
                    tfvars.swap_inner(var, new)
                    moved += 1
                    if var.name in placed:
                        placement.move(var.name, dead, dst, int(value.nbytes),
                                       2 if var.trainable else 1)
                else:
                    assigns.append((old, value))
            for old, value in assigns:
                old.assign(value)
        return moved


def _steps_lost(rolled_back: int) -> str:
    """ASP's line on the applied steps a rollback undid. Negative: steps that failed as the
    PS died had landed in the copy (read while they ran) and run again: ASP's steps are
    at least once, as under a worker's death.

    >>> _steps_lost(2), _steps_lost(-1)
    ('2 applied step(s) lost', 'no applied step lost; 1 step(s) that failed as the PS died had landed in the copy and run again (ASP steps run at least once)')
    """
    if rolled_back >= 0:
        return f"{rolled_back} applied step(s) lost"
    return (f"no applied step lost; {-rolled_back} step(s) that failed as the PS died had "
            "landed in the copy and run again (ASP steps run at least once)")


def _listens(address: str) -> bool:
    """Whether ``host:port`` accepts TCP connections (0.5 s bound, as a server's start)."""
    return answers(address, timeout_s=0.5)
