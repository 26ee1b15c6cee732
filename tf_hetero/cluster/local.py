"""A whole PS cluster on localhost: the ``torchrun`` of tf.distribute.

:class:`LocalCluster` starts one ``tf.distribute.Server`` per worker and PS task, either as
separate OS processes (``processes=True``, the default: each the server ``tf-hetero launch``
runs, with its own ``TF_CONFIG``, exactly as on a real cluster; on Linux forked from one
process that imported TensorFlow once, :mod:`~tf_hetero.cluster.forkserver`) or inside the
calling process (``processes=False``: quick, for notebooks). The calling process is the chief (coordinator).

>>> import tf_hetero, tensorflow as tf                         # doctest: +SKIP
>>> with tf_hetero.LocalCluster(num_workers=4, num_ps=2, profile="slow=3:4") as cluster:
...     strategy = tf.distribute.ParameterServerStrategy(cluster.resolver)
...     ...  # build, tf_hetero.emulate(model, cluster.profile, strategy=strategy), model.fit

Servers listen on 127.0.0.1 only. Process-mode servers are torn down on ``stop()``/exit, and
die with the process that started them even if it is killed (``PR_SET_PDEATHSIG``).
In-process servers cannot be stopped (TensorFlow has no server shutdown): they live until the
process exits.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Mapping, Sequence

from tf_hetero import env as _env, tflogs
from tf_hetero.emulation.profile import PROFILE_ENV, Profile
from tf_hetero.cluster import forkserver
from tf_hetero.cluster.ports import pick_ports, release_ports
from tf_hetero.cluster.reach import answers, call_bounded
from tf_hetero.cluster.tf_config import make_tf_config, validate_cluster

__all__ = ["LocalCluster", "ClusterStartError", "pick_ports", "listening"]

#: Seconds a server process (or the fork server) may take to listen on its port (to import
#: TensorFlow). Measured on the 2-core dev machine: ~3-6 s for a cold TensorFlow import, ~15 s
#: with six processes starting at once.
DEFAULT_START_TIMEOUT_S = 120.0
#: Seconds a server gets between SIGTERM and SIGKILL on teardown.
STOP_GRACE_S = 5.0
#: Seconds :meth:`LocalCluster.stop` lets the eager context close its remote contexts before
#: stopping the servers anyway (measured: once ~4 min at the end of a bench, see _detach).
DETACH_TIMEOUT_S = 15.0


class ClusterStartError(RuntimeError):
    """A local server did not come up; the message carries the end of its log."""


def die_with_parent() -> None:  # runs in the child between fork and exec
    forkserver.set_death_signal(signal.SIGTERM)


_spawner: concurrent.futures.ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def spawn(*args, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(*args, preexec_fn=die_with_parent, **kwargs)`` from one thread that
    lives as long as this process. ``PR_SET_PDEATHSIG`` fires when the *thread* that forked
    the child ends, not the process: a server restarted from a thread that then returned
    (a test's killer thread) got SIGTERM seconds later, and a failover onto it met
    "Connection refused" while its restart had been seen listening."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="tf-hetero-spawner")
    return _spawner.submit(subprocess.Popen, *args, preexec_fn=die_with_parent,
                           **kwargs).result()


def listening(host: str, port: int) -> bool:
    """Whether a process accepts TCP connections on ``host:port`` (0.5 s bound)."""
    return answers(f"{host}:{port}", timeout_s=0.5)


class LocalCluster:
    """A chief (this process), ``num_workers`` workers and ``num_ps`` PS tasks on localhost.

    Args:
      num_workers: worker tasks (>= 1).
      num_ps: parameter-server tasks (>= 1).
      profile: heterogeneity profile (inline spec, JSON path, dict or
        :class:`~tf_hetero.emulation.profile.Profile`) for :func:`tf_hetero.emulate`; exported to the
        chief program as ``TF_HETERO_PROFILE`` by :meth:`chief_env`.
      processes: one OS process per server (``True``) or servers inside this process.
      fork: process mode: fork the servers from one process that imported TensorFlow once
        (``True``, the default where it is available: Linux; ~2.6 s to a listening 3-worker,
        2-PS cluster here instead of ~10 s) or start each as its own ``tf-hetero launch``,
        which imports TensorFlow itself (``False``; the only way elsewhere).
      start_timeout: seconds to wait for every server to listen before giving up.
      log_dir: where process-mode servers write their logs (a temporary folder by default).

    Attributes:
      resolver: a ``SimpleClusterResolver`` for ``tf.distribute.ParameterServerStrategy``.
      cluster_spec: ``{"chief": [...], "worker": [...], "ps": [...]}`` addresses.
    """

    def __init__(self, num_workers: int = 2, num_ps: int = 1, *, profile=None,
                 processes: bool = True, fork: bool | None = None,
                 start_timeout: float = DEFAULT_START_TIMEOUT_S,
                 log_dir: str | None = None, host: str = "127.0.0.1"):
        for name, value in (("num_workers", num_workers), ("num_ps", num_ps)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"LocalCluster({name}={value!r}): need an integer >= 1.")
        if start_timeout <= 0:
            raise ValueError(f"LocalCluster(start_timeout={start_timeout!r}): need seconds > 0.")
        self.num_workers, self.num_ps = num_workers, num_ps
        self.profile = Profile.parse(profile)
        self.profile.check_workers(num_workers)
        if fork and not forkserver.AVAILABLE:
            raise ValueError(f"LocalCluster(fork=True): forking servers needs Linux (this is "
                             f"{sys.platform}). Fix: leave fork unset or pass fork=False.")
        self.processes = processes
        self.fork = forkserver.AVAILABLE if fork is None else bool(fork)
        self.start_timeout = float(start_timeout)
        self.host = host
        self.log_dir = log_dir
        # Reserved for this object's life, across restarts of its servers (ports.py).
        ports = pick_ports(1 + num_workers + num_ps, host)
        weakref.finalize(self, release_ports, ports)
        addr = [f"{host}:{p}" for p in ports]
        self.cluster_spec: dict[str, list[str]] = {
            "chief": addr[:1],
            "worker": addr[1:1 + num_workers],
            "ps": addr[1 + num_workers:],
        }
        validate_cluster(self.cluster_spec)
        # Each server's process: a subprocess.Popen or a forkserver.ForkedProcess.
        self._procs: dict[tuple[str, int], subprocess.Popen | forkserver.ForkedProcess] = {}
        self._servers: list = []  # in-process tf.distribute.Server objects
        self._forker: forkserver.ForkServer | None = None
        self._started = False

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        mode = "processes" if self.processes else "in-process"
        return (f"LocalCluster(num_workers={self.num_workers}, num_ps={self.num_ps}, "
                f"profile={self.profile.spec()!r}, {mode}, started={self._started})")

    def start(self) -> "LocalCluster":
        """Starts every worker and PS server and waits until each one listens."""
        if self._started:
            return self
        if self.processes:
            if self.log_dir is None:
                self.log_dir = tempfile.mkdtemp(prefix="tf_hetero_cluster_")
            os.makedirs(self.log_dir, exist_ok=True)
            try:
                self._start_forkserver()
                for role in ("ps", "worker"):
                    for i in range(len(self.cluster_spec[role])):
                        self._spawn(role, i)
                self._wait_listening(list(self._procs))
            except BaseException:
                self.stop()
                raise
        else:
            self._start_in_process()
        self._started = True
        return self

    def stop(self) -> None:
        """Terminates process-mode servers (SIGTERM, then SIGKILL after a grace period), after
        detaching this process from them (:meth:`_detach`), so nothing later talks to them."""
        if self._procs:
            self._detach_bounded()
        procs = list(self._procs.values())
        for p in procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=STOP_GRACE_S)
        self._procs.clear()
        if self._forker is not None:
            self._forker.close(STOP_GRACE_S)
            self._forker = None
        self._started = False

    def _detach_bounded(self) -> None:
        """:meth:`_detach` with a bound: ``update_server_def`` waits for every remote task
        to close its context, without a timeout; once, at the end of a 12-row bench, it
        took ~4 minutes (two servers still busy). After ``DETACH_TIMEOUT_S`` the servers are
        stopped anyway (at worst, TensorFlow logs a failed remote function removal at exit)."""
        ended, error = call_bounded(self._detach, DETACH_TIMEOUT_S, "tf-hetero-detach")
        if not ended:
            print(f"[tf-hetero] LocalCluster.stop: closing the remote contexts took more than "
                  f"{DETACH_TIMEOUT_S:.0f} s (a task did not answer); stopping the servers "
                  "anyway.", file=sys.stderr, flush=True)
        elif error is not None:
            raise error

    def _detach(self) -> None:
        """Makes this process's eager context local-only when it is connected to this cluster.

        A ``ParameterServerStrategy`` connects the eager context to every task. Once the
        servers are gone, each ``tf.function`` freed later (at the latest when the program
        exits) is removed from every remote task it was registered on, and each removal logs
        "Failed to remove function remotely ... Connection refused" (~130 lines for the README
        example). ``update_server_def`` with only this process's job closes the remote
        contexts while the servers still answer (~10 ms here) and removes later frees from
        nothing but this process. Variables on the cluster cannot be used afterwards, as
        they could not once the servers stop. docs/TF_INTERNALS.md, "Clean exit"."""
        if "tensorflow" not in sys.modules:  # nothing can be connected
            return
        from tf_hetero import tfcompat

        # Connected to another cluster (or not to a remote one): not ours to touch.
        tfcompat.ops.keep_only_local_job(
            {a for role in ("worker", "ps") for a in self.cluster_spec[role]})

    # ------------------------------------------------------------------ access
    @property
    def resolver(self):
        import tensorflow as tf

        spec = tf.train.ClusterSpec(self.cluster_spec)
        return tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")

    def tf_config(self, role: str, index: int = 0) -> str:
        """The ``TF_CONFIG`` JSON of one task of this cluster."""
        return make_tf_config(self.cluster_spec, role, index)

    def chief_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for a chief training program: ``TF_CONFIG``, the profile, and quiet
        TensorFlow logs unless wanted (:func:`tf_hetero.tflogs.child_env`)."""
        env = tflogs.child_env(_env.copy() if base is None else dict(base))
        env["TF_CONFIG"] = self.tf_config("chief", 0)
        env[PROFILE_ENV] = self.profile.spec()
        return env

    def pids(self) -> list[int]:
        """PIDs of the live process-mode servers."""
        return [p.pid for p in self._procs.values() if p.poll() is None]

    def role_pids(self) -> dict:
        """``{(role, index): pid}`` of the live process-mode servers."""
        return {key: p.pid for key, p in self._procs.items() if p.poll() is None}

    def log_path(self, role: str, index: int) -> str:
        return os.path.join(self.log_dir or "", f"{role}-{index}.log")

    # ------------------------------------------------- failures (process mode)
    def kill(self, role: str, index: int, sig: int = signal.SIGKILL) -> None:
        """Kills one server process (for failure experiments and tests)."""
        proc = self._proc(role, index)
        proc.send_signal(sig)
        proc.wait(timeout=STOP_GRACE_S * 2)

    def restart(self, role: str, index: int) -> None:
        """Starts a killed server again on the same address and waits until it listens."""
        proc = self._proc(role, index)
        if proc.poll() is None:
            raise RuntimeError(f"{role} {index} (pid {proc.pid}) is still running; kill it first.")
        self._spawn(role, index)
        self._wait_listening([(role, index)])

    def _proc(self, role: str, index: int):
        if not self.processes:
            raise RuntimeError("kill/restart need LocalCluster(processes=True): in-process "
                               "servers cannot be stopped.")
        try:
            return self._procs[(role, index)]
        except KeyError:
            raise ValueError(f"No {role} task {index} in this cluster; it has "
                             f"{len(self.cluster_spec.get(role, []))} {role} tasks.") from None

    # ---------------------------------------------------------------- internals
    def _server_env(self) -> dict:
        env = tflogs.child_env(_env.copy())  # quiet unless TF_HETERO_TF_LOGS=1
        env.pop("TF_CONFIG", None)
        # Make the package importable in the child even when it is used from a source tree.
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pkg_root, env.get("PYTHONPATH")]))
        return env

    def _start_forkserver(self) -> None:
        """The process every server of this cluster is forked from (``fork``; otherwise each
        server is its own ``tf-hetero launch``, which imports TensorFlow itself)."""
        if not self.fork:
            return
        self._forker = forkserver.ForkServer(
            self._server_env(), os.path.join(self.log_dir, "forkserver.log"), spawn)
        try:
            self._forker.wait_ready(self.start_timeout)
        except forkserver.ForkServerError as e:
            raise ClusterStartError(str(e)) from None

    def _spawn(self, role: str, index: int) -> None:
        env = self._server_env()
        env["TF_CONFIG"] = self.tf_config(role, index)
        if self._forker is not None:
            try:
                self._procs[(role, index)] = self._forker.fork(env, self.log_path(role, index))
            except forkserver.ForkServerError as e:
                raise ClusterStartError(f"{role} {index} was not started: {e}") from None
            return
        log = open(self.log_path(role, index), "ab")
        try:
            self._procs[(role, index)] = spawn(
                [sys.executable, "-m", "tf_hetero", "launch"], env=env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        finally:
            log.close()

    def _wait_listening(self, tasks: Sequence[tuple[str, int]]) -> None:
        deadline = time.monotonic() + self.start_timeout
        pending = list(tasks)
        while pending:
            role, index = pending[0]
            proc = self._procs[(role, index)]
            host, port = self.cluster_spec[role][index].rsplit(":", 1)
            if proc.poll() is not None:
                raise ClusterStartError(
                    f"{role} {index} exited with code {proc.returncode} before listening on "
                    f"{host}:{port}. Its log ({self.log_path(role, index)}) ends with:\n"
                    + self._log_tail(role, index))
            if listening(host, int(port)):
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"{role} {index} did not listen on {host}:{port} within "
                    f"{self.start_timeout:.0f} s. Fix: raise start_timeout, or check its log "
                    f"({self.log_path(role, index)}), which ends with:\n" + self._log_tail(role, index))
            time.sleep(0.1)

    def _log_tail(self, role: str, index: int) -> str:
        return forkserver.log_tail(self.log_path(role, index))

    def _start_in_process(self) -> None:
        import tensorflow as tf

        spec = tf.train.ClusterSpec(self.cluster_spec)
        worker_config = tf.compat.v1.ConfigProto()
        # The in-process servers share one inter-op pool, and a function blocked on another
        # task (a recv, a sleeping input pipeline) holds its thread. With fewer threads than
        # blocked functions the cluster deadlocks (docs/TF_INTERNALS.md section 10): TF's
        # tutorial gives each worker one, plus one; a fit that failed or hit the stall bound
        # can leave one function per worker in flight beside the next fit's, so allow two.
        # Blocked threads cost no CPU.
        worker_config.inter_op_parallelism_threads = 2 * (self.num_workers + 1)
        for i in range(self.num_workers):
            self._servers.append(tf.distribute.Server(
                spec, job_name="worker", task_index=i, config=worker_config,
                protocol="grpc", start=True))
        for i in range(self.num_ps):
            self._servers.append(tf.distribute.Server(
                spec, job_name="ps", task_index=i, protocol="grpc", start=True))

