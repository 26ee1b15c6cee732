"""Free TCP ports for local clusters, reserved across the processes of this machine.

A port that is free when it is picked stays free only until something binds it. A
:class:`~tf_hetero.cluster.local.LocalCluster` fixes its servers' addresses when it is made
and binds them later; a server killed and restarted (failover) frees its port for the time
it is down. Meanwhile another process on the machine that picks ports (a second test
process, another bench) could start a server on it, and the cluster's chief would then
talk to that server as if it were its own worker: measured once in a fresh-clone suite
run (two pytest-xdist processes), a step of the failover test ran on another test's
cluster and read its labels (docs/FAILOVER.md).

So :func:`pick_ports` reserves each port it hands out with an advisory lock
(``flock``) on a file named after the port, held by the picking process until
:func:`release_ports` or its exit (the kernel drops the lock with the process, so a
crashed process reserves nothing), and skips ports another process (or an earlier call
of this one) holds. It guards tf-hetero's own processes from each other, not unrelated
programs, which do not look at the locks. Without ``fcntl`` (Windows) nothing is reserved.

>>> ports = pick_ports(2)
>>> len(set(ports)), all(p in reserved() for p in ports)
(2, True)
>>> release_ports(ports); any(p in reserved() for p in ports)
False
"""

from __future__ import annotations

import os
import tempfile
import threading

try:
    import fcntl
except ImportError:  # Windows: no advisory locks, no reservation
    fcntl = None

__all__ = ["pick_ports", "release_ports", "reserved", "LOCK_DIR"]

#: Where the per-port lock files live (shared by every user of the machine: mode 1777).
LOCK_DIR = os.path.join(tempfile.gettempdir(), "tf_hetero_ports")
#: Ports portpicker may offer before :func:`pick_ports` gives up (each one either taken
#: since portpicker checked or reserved by another process).
MAX_TRIES = 1000

_held: dict[int, int] = {}  # port -> the open descriptor that holds its lock
_lock = threading.Lock()


def _lock_file(port: int) -> str:
    if not os.path.isdir(LOCK_DIR):
        os.makedirs(LOCK_DIR, exist_ok=True)
        try:
            os.chmod(LOCK_DIR, 0o1777)  # other users' processes reserve here too
        except OSError:
            pass  # made by another user meanwhile: theirs to set
    return os.path.join(LOCK_DIR, str(port))


def _reserve(port: int) -> bool:
    """Takes ``port``'s lock for this process; False if another holder has it."""
    if fcntl is None:
        return True
    with _lock:
        if port in _held:
            return False
        path = _lock_file(port)
        try:  # read-only: flock needs no write access, so another user's file serves too
            fd = os.open(path, os.O_CREAT | os.O_RDONLY | os.O_CLOEXEC, 0o666)
        except PermissionError as e:
            raise PermissionError(
                f"pick_ports: cannot create the port lock file {path} ({e.strerror}). Fix: "
                f"make {LOCK_DIR} writable for every user (chmod 1777) or remove it.") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: held by another process
            os.close(fd)
            return False
        _held[port] = fd
        return True


def pick_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports free on ``host`` and reserved for this process (see the
    module's docstring) until :func:`release_ports` or its exit."""
    import portpicker  # local import: only the launcher needs it

    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"pick_ports(n={n!r}): need an integer >= 0.")
    ports: list[int] = []
    for _ in range(MAX_TRIES):
        if len(ports) == n:
            return ports
        port = portpicker.pick_unused_port()
        if port not in ports and _reserve(port):
            ports.append(port)
    release_ports(ports)
    raise RuntimeError(
        f"pick_ports({n}): {MAX_TRIES} ports offered as free were all taken or reserved by "
        f"other tf-hetero processes (lock files in {LOCK_DIR}). Fix: stop the local clusters "
        f"you no longer need, or free ports in the system's ephemeral range.")


def release_ports(ports) -> None:
    """Gives back this process's reservation of ``ports`` (ports it does not hold are
    ignored); the lock files stay, empty, for the next reservation."""
    with _lock:
        for port in ports:
            fd = _held.pop(port, None)
            if fd is not None:
                os.close(fd)  # closing the descriptor drops its flock


def reserved() -> frozenset[int]:
    """The ports this process holds."""
    with _lock:
        return frozenset(_held)
