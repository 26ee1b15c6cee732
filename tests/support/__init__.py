"""What the tests share that is not a fixture (fixtures live in the ``conftest.py`` files).

No test module imports another test module: everything two of them use is here.

- this module: the repository's path, the ``tf-hetero`` command in a subprocess, bounded waits
  and process checks (cluster tests start real servers; every wait is bounded);
- :mod:`support.fakes`: a fake clock and a recording dispatcher for the pure engine;
- :mod:`support.engine`: engines with the baseline policies on those fakes;
- :mod:`support.small`: a small seeded classification problem and model;
- :mod:`support.fit`: fits on the shared in-process cluster (3 workers) and their checks;
- :mod:`support.keras3`: the small problem with a Keras 3 model, and the check that a Keras 3
  fit on a cluster ran on the workers;
- :mod:`support.toy_policy`: a new assignment policy, as a user would add one;
- :mod:`support.notebooks`: the Colab notebooks run with small settings;
- :mod:`support.layers`: the package's modules and their imports, parsed once (the layer
  check, the doctest collector and the no-TensorFlow check read them);
- :mod:`support.zygote`: those chief programs forked from one process that imported
  TensorFlow once;
- ``support/scenarios/``: chief programs of the failure tests (and benchmarks/chaos.py).
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import time

#: The repository (the folder of ``tests/``).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Bound on any single CLI invocation in the tests (a cluster start is ~15 s here).
CLI_TIMEOUT_S = 300


def cli(*args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT_S,
        cwd: str | None = None) -> subprocess.CompletedProcess:
    """Runs ``python -m tf_hetero ARGS`` and returns the finished process."""
    return subprocess.run([sys.executable, "-m", "tf_hetero", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


class LazyModule:
    """The module ``name``, imported at the first attribute read.

    A test module that needs TensorFlow (or a module of ours that imports it) names it at
    the top as ``tf = LazyModule("tensorflow")``: collecting the module then imports no
    TensorFlow, so an xdist worker that runs no TensorFlow test never pays its import
    (~7 s here; `make test-fast` keeps those tests on one worker, tests/conftest.py).

    >>> json = LazyModule("json")
    >>> json.dumps([1])
    '[1]'
    """

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        # pytest's collection probes every module-level object (``__test__``, ``pytestmark``,
        # its fixture marker): those must not import the module. A test reads only public names.
        if attribute.startswith("_") or attribute == "pytestmark":
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self._name), attribute)

    def __repr__(self) -> str:
        return f"LazyModule({self._name!r})"


def alive(pid: int) -> bool:
    """True if ``pid`` is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:
    """Polls ``predicate`` until it holds or ``timeout`` seconds passed; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def server_pids(log_dir: str, *, forkserver: bool = False) -> list[int]:
    """PIDs that the servers of a ``tf-hetero run --log-dir`` cluster printed at start (and
    its fork server's, given ``forkserver``: every process the cluster started)."""
    pattern = r"(?:serving on \S+|fork server) \(pid (\d+)\)" if forkserver else \
        r"serving on \S+ \(pid (\d+)\)"
    pids = []
    for name in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, name), errors="replace") as f:
            pids += [int(m) for m in re.findall(pattern, f.read())]
    return pids
