"""Shared helpers for the test suite.

Cluster tests start real TensorFlow servers: separate OS processes through the real launcher,
or one in-process cluster per module. Every wait below is bounded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

# Quiet TensorFlow's C++ logging in this process and in the processes the tests start.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Bound on any single CLI invocation in the tests (a cluster start is ~15 s here).
CLI_TIMEOUT_S = 300


def cli(*args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT_S,
        cwd: str | None = None) -> subprocess.CompletedProcess:
    """Runs ``python -m tf_hetero ARGS`` and returns the finished process."""
    return subprocess.run([sys.executable, "-m", "tf_hetero", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def alive(pid: int) -> bool:
    """True if ``pid`` is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def server_pids(log_dir: str) -> list[int]:
    """PIDs that the servers of a ``tf-hetero run --log-dir`` cluster printed at start."""
    pids = []
    for name in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, name), errors="replace") as f:
            pids += [int(m) for m in re.findall(r"serving on \S+ \(pid (\d+)\)", f.read())]
    return pids


@pytest.fixture
def quiet_env():
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("TF_CONFIG", None)
    return env


@pytest.fixture(scope="session")
def inprocess_cluster():
    """One in-process cluster (3 workers, 2 PS) for every module that trains on it: each test
    builds its own strategy on it (a strategy reconnects the process to the cluster).

    In-process servers cannot be stopped. Starting another in-process cluster after this one
    has trained (test_stock_pss_inprocess.py did, when it ran after it) hung fit in the
    new cluster: the modules using this fixture are named to run after that one."""
    import tf_hetero

    return tf_hetero.LocalCluster(3, 2, processes=False).start()
