"""Server processes forked from one process that has already imported TensorFlow.

A worker or PS server spends ~3 s of CPU importing TensorFlow before it listens: a 3-worker,
2-PS cluster's servers took 18-20 s of CPU to start on 2 cores, and every restart of a killed
server paid it again. :class:`ForkServer` imports TensorFlow once per
:class:`~tf_hetero.cluster.local.LocalCluster` and forks each server from that process: the
child is the same server ``tf-hetero launch`` starts (its own process, session, ``TF_CONFIG``,
log file and exit code), only without the import (docs/TF_INTERNALS.md, "Forking servers").

Forking is safe there because the forking process has run no TensorFlow op and has one
thread: ``import tensorflow`` starts none of its own, and ``OPENBLAS_NUM_THREADS=1`` keeps
numpy's BLAS pool out; the fork server checks that before it forks anything and refuses
otherwise. A forked server dies with the fork server, which dies with the process that started
it (``PR_SET_PDEATHSIG``, Linux only: :data:`AVAILABLE`).

The protocol is one JSON line each way, request then reply, over the fork server's stdin and
stdout:

>>> encode({"op": "poll", "pid": 12})
b'{"op": "poll", "pid": 12}\\n'
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback

from tf_hetero import env as _env

__all__ = ["ForkServer", "ForkServerError", "AVAILABLE", "set_death_signal", "log_tail",
           "serve_forks", "enter_child"]

#: Forking needs PR_SET_PDEATHSIG (a server must die with the fork server) and fork itself.
AVAILABLE = sys.platform.startswith("linux")
#: Seconds between the fork server's reaps of its exited servers while no request comes.
_REAP_S = 0.1
#: Seconds a request may wait for its reply (a fork takes milliseconds).
_REPLY_TIMEOUT_S = 30.0


class ForkServerError(RuntimeError):
    """The fork server did not start, refused to fork, or stopped answering."""


def encode(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def set_death_signal(sig: int) -> None:
    """``prctl(PR_SET_PDEATHSIG, sig)``: this process gets ``sig`` when its parent's thread
    that forked it ends."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # 1: PR_SET_PDEATHSIG


def log_tail(path: str, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file (for an error message)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


class ForkServer:
    """One fork server: started by the constructor; :meth:`wait_ready`, then :meth:`fork`
    per server.

    Args:
      env: the environment the servers get (each :meth:`fork` adds its own ``TF_CONFIG``); the
        fork server imports TensorFlow under it, so what TensorFlow reads at import is the same.
      log_path: the fork server's own log (its import's output and any refusal).
      spawn: starts the fork server's process (``Popen``'s signature): the caller's spawner,
        so that the fork server dies with the caller.
    """

    def __init__(self, env: dict, log_path: str, spawn, command: list | None = None,
                 name: str = "the fork server of this cluster") -> None:
        self.log_path, self.name = log_path, name
        self._lock = threading.Lock()
        zygote_env = dict(env, OPENBLAS_NUM_THREADS="1")
        with open(log_path, "ab") as log:
            # command: another program serving forks the same way (serve_forks), e.g. the
            # tests' chief zygote (tests/support/zygote.py)
            self._proc = spawn(command or [sys.executable, "-m", "tf_hetero.cluster.forkserver"],
                               env=zygote_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=log, start_new_session=True)
        self._ready = False

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wait_ready(self, timeout: float) -> None:
        """Waits until the fork server has imported TensorFlow (or raises, with its log)."""
        if not self._ready:
            self._read_reply(timeout)
            self._ready = True

    def fork(self, env: dict, log_path: str, **request) -> "ForkedProcess":
        """Forks one server: ``env`` (with its ``TF_CONFIG``), output to ``log_path``
        (``request``: more of the request, for another :func:`serve_forks` program)."""
        reply = self._request({"op": "fork", "env": env, "log": log_path, **request})
        return ForkedProcess(self, reply["pid"])

    def returncode(self, pid: int) -> int | None:
        """The exit code of a forked server (``-N``: killed by signal N), ``None`` while it
        runs. Once the fork server is gone its servers are too (``PR_SET_PDEATHSIG``)."""
        if self._proc.poll() is not None:
            return _gone_code(pid)
        try:
            return self._request({"op": "poll", "pid": pid})["code"]
        except ForkServerError:
            if self._proc.poll() is not None:
                return _gone_code(pid)
            raise

    def close(self, timeout: float) -> None:
        """Ends the fork server (its stdin closes; it exits, and a server still running gets
        SIGKILL from its death signal)."""
        with self._lock:
            if self._proc.stdin and not self._proc.stdin.closed:
                try:
                    self._proc.stdin.close()
                except OSError:
                    pass
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=timeout)
        if self._proc.stdout:
            self._proc.stdout.close()

    # ---------------------------------------------------------------- internals
    def _request(self, message: dict) -> dict:
        with self._lock:
            try:
                self._proc.stdin.write(encode(message))
                self._proc.stdin.flush()
            except (OSError, ValueError):
                raise self._error("stopped taking requests") from None
            return self._read_reply(_REPLY_TIMEOUT_S)

    def _read_reply(self, timeout: float) -> dict:
        out = self._proc.stdout
        ready, _, _ = select.select([out], [], [], timeout)
        line = out.readline() if ready else b""
        if not line:
            what = "did not answer within %.0f s" % timeout if not ready else "exited"
            raise self._error(what)
        reply = json.loads(line)
        if "error" in reply:
            raise self._error("refused: " + reply["error"])
        return reply

    def _error(self, what: str) -> ForkServerError:
        return ForkServerError(f"{self.name} (pid {self._proc.pid}) {what}. "
                               f"Its log ({self.log_path}) ends with:\n"
                               + log_tail(self.log_path))


def _gone_code(pid: int) -> int | None:
    """A server whose fork server is gone: it got SIGKILL, or is about to."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return -signal.SIGKILL
    return -signal.SIGKILL if state in ("Z", "X") else None


class ForkedProcess:
    """A forked server, with the part of ``subprocess.Popen`` that LocalCluster uses."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self._server, self.pid = server, pid
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        if self._code is None:
            self._code = self._server.returncode(self.pid)
        return self._code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet, so the pid is still this server's
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"forked server {self.pid}", timeout)
            time.sleep(0.02)
        return self._code


# ---------------------------------------------------------------------- the fork server
def _serve_requests() -> None:  # pragma: no cover - runs in the fork server's process
    """The fork server's main: imports TensorFlow as a server would, checks it is alone in
    its process, then forks one server per request until its stdin closes."""
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # what the import prints goes to the log, not into the replies
    from tf_hetero.cluster import roles

    roles.without_keras()
    import tensorflow  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel

    set_death_signal(signal.SIGTERM)  # with the process that started this one
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1:
        names = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in threads)
        replies.write(encode({"error": f"{len(threads)} threads after import tensorflow "
                                       f"({names}); forking one is unsafe. Fix: remove what "
                                       "starts a thread when tensorflow is imported in the "
                                       "servers' environment (a sitecustomize, an import "
                                       "hook, a BLAS pool: *_NUM_THREADS=1), or start each "
                                       "server on its own: LocalCluster(..., fork=False)"}))
        return
    print(f"tf-hetero: fork server (pid {os.getpid()}) imported TensorFlow; forking this "
          "cluster's servers", file=sys.stderr, flush=True)
    serve_forks(replies, _become_server)


def serve_forks(replies, become) -> None:  # pragma: no cover - in the fork server's process
    """Says it is ready, then forks one child per ``fork`` request (which runs ``become(
    request, replies)`` and must not return) and answers ``poll`` requests with a child's exit
    code, until stdin closes."""
    replies.write(encode({"ready": os.getpid()}))
    codes: dict[int, int | None] = {}
    stdin = sys.stdin.buffer
    while True:
        _reap(codes)
        if not select.select([stdin], [], [], _REAP_S)[0]:
            continue
        line = stdin.readline()
        if not line:
            return  # the cluster closed it: end, and the servers with us
        request = json.loads(line)
        if request["op"] == "fork":
            pid = os.fork()
            if pid == 0:
                become(request, replies)
            codes[pid] = None
            replies.write(encode({"pid": pid}))
        elif request["op"] == "poll":
            _reap(codes)
            replies.write(encode({"code": codes.get(request["pid"])}))


def _reap(codes: dict) -> None:  # pragma: no cover - runs in the fork server's process
    for pid, code in list(codes.items()):
        if code is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[pid] = os.waitstatus_to_exitcode(status)


def enter_child(request: dict, replies) -> None:  # pragma: no cover - in a forked child
    """In a child :func:`serve_forks` forked: dies with the fork server; no stdin; stdout and
    stderr to ``request["log"]``; the environment ``request["env"]``."""
    set_death_signal(signal.SIGKILL)  # with the fork server
    replies.close()
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd, to in ((null, 0), (log, 1), (log, 2)):
        os.dup2(fd, to)
    os.close(null)
    os.close(log)
    _env.replace(request["env"])


def _become_server(request: dict, replies) -> None:  # pragma: no cover - in a forked child
    """The forked child: a session, log and environment of its own, then ``serve``."""
    from tf_hetero.cluster import roles

    code = 1
    try:
        os.setsid()  # like start_new_session: a terminal's Ctrl-C is the chief's alone
        enter_child(request, replies)
        code = roles.serve(roles.parse_tf_config())
    except BaseException:  # pylint: disable=broad-except
        traceback.print_exc()
    finally:
        roles.exit_without_tf_teardown(code)


if __name__ == "__main__":  # pragma: no cover
    _serve_requests()
