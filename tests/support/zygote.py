"""Chief programs forked from one process that has already imported TensorFlow.

The failure tests run each scenario in a chief process of its own (a fresh chief for a fresh
cluster), and each such process spent ~3.3 s of CPU importing TensorFlow, tf_keras and
tf_hetero: 18 chiefs, ~60 core-s of a ~1,450 core-s suite on 2 cores
(benchmarks/results/2026-12-06-suite-time/, run 4). :class:`Zygote` imports them once and
forks each chief from that process: the child is the program ``python SCRIPT ARGS...`` would
run (its ``__main__``, ``sys.argv``, environment, working folder, output files and exit code),
only without the import.

Forking is safe for the reason the servers' fork server gives
(:mod:`tf_hetero.cluster.forkserver`): the zygote has run no TensorFlow op and has one thread
(``OPENBLAS_NUM_THREADS=1`` keeps numpy's BLAS pool out), which it checks before it forks.
What TensorFlow reads from the environment at import is the zygote's: the tests' (with
``TF_CPP_MIN_LOG_LEVEL=2``). A forked chief dies with the zygote, which dies with the test
process that started it.

The client is the servers' :class:`~tf_hetero.cluster.forkserver.ForkServer` and the zygote
serves its protocol (:func:`~tf_hetero.cluster.forkserver.serve_forks`), with a program to run
in each ``fork`` request.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time

from tf_hetero.cluster.forkserver import (ForkServer, encode, enter_child, serve_forks,
                                          set_death_signal)

__all__ = ["Zygote", "Finished"]

#: Seconds the zygote may take to import TensorFlow (~3-6 s here; more beside a loaded suite).
START_TIMEOUT_S = 120.0


class Finished:
    """A forked program that ended: ``returncode`` and its output (``stdout`` and ``stderr``
    both hold its one log, stdout and stderr together)."""

    def __init__(self, returncode: int, output: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, output, output


class Zygote:
    """Started by the constructor (it imports in the background); :meth:`run` per program,
    :meth:`close` at the end.

    >>> zygote = Zygote("/tmp/z.log")                                # doctest: +SKIP
    >>> zygote.run("tests/support/scenarios/failures.py", ["worker", "out.json"],
    ...            env=dict(os.environ), timeout=300, folder="/tmp").returncode   # doctest: +SKIP
    0
    """

    def __init__(self, log_path: str) -> None:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("TF_CONFIG", None)
        spawn = functools.partial(subprocess.Popen, preexec_fn=_die_with_parent)
        self._server = ForkServer(env, log_path, spawn, name="the tests' chief zygote",
                                  command=[sys.executable, os.path.abspath(__file__)])

    def run(self, script: str, args: list, env: dict, timeout: float, folder: str) -> Finished:
        """Runs ``python script *args`` as a fork of the zygote, in ``folder`` (its log goes
        there too); raises ``subprocess.TimeoutExpired`` (the program killed) after
        ``timeout`` seconds."""
        self._server.wait_ready(START_TIMEOUT_S)
        log = os.path.join(folder, f"{os.path.basename(script)}-{time.monotonic_ns()}.log")
        proc = self._server.fork(env, log, script=os.path.abspath(script),
                                 args=[str(a) for a in args], cwd=folder)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        with open(log, errors="replace") as f:
            return Finished(code, f.read())

    def close(self) -> None:
        """Ends the zygote (a program still running dies with it)."""
        self._server.close(timeout=10)


def _die_with_parent() -> None:  # in the zygote's process, between fork and exec
    set_death_signal(signal.SIGTERM)


# ---------------------------------------------------------------------- the zygote
def _serve() -> None:  # pragma: no cover - runs in the zygote's process
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # what the imports print goes to the log, not into the replies
    import tensorflow  # noqa: F401  pylint: disable=unused-import
    import tf_keras  # noqa: F401  pylint: disable=unused-import

    import tf_hetero  # noqa: F401  pylint: disable=unused-import

    set_death_signal(signal.SIGTERM)  # with the test process
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        replies.write(encode({"error": f"{threads} threads after the imports: forking is "
                                       "unsafe"}))
        return
    serve_forks(replies, _become)


def _become(request: dict, replies) -> None:  # pragma: no cover - in a forked child
    """The forked child: the program's log, environment, folder and ``__main__``."""
    import atexit
    import runpy
    import traceback

    code = 1
    try:
        enter_child(request, replies)  # dies with the zygote; its log; its environment
        os.chdir(request["cwd"])
        script = request["script"]
        sys.argv = [script, *request["args"]]
        sys.path[0] = os.path.dirname(script)  # as `python script` sets it
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if code and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        atexit._run_exitfuncs()  # pylint: disable=protected-access
    except BaseException:  # pylint: disable=broad-except
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # pylint: disable=broad-except
                pass
        os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    _serve()
