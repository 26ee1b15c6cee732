"""A bounded wait for a cluster's servers before connecting to them.

``tf.distribute.ParameterServerStrategy(resolver)`` connects the eager context to every worker
and PS task, and waits for ever, silently, while one of them is not up (checked: 90 s and
counting with no output). :func:`wait_for_cluster` waits until every worker and PS address
accepts a TCP connection, printing who is still missing every ``report_every_s``, and gives up
after ``timeout_s`` with one error naming the tasks that did not answer and how to start them.
Every tf-hetero strategy calls it before connecting (``connect_timeout_s``, default
:data:`DEFAULT_CONNECT_TIMEOUT_S`, or the environment variable :data:`CONNECT_TIMEOUT_ENV`);
users of stock ``ParameterServerStrategy`` can call it themselves.

A listening port is what TensorFlow needs first (a task that listens but is wedged still
hangs inside TensorFlow; tf-hetero's stall bounds cover training after that).

>>> wait_for_cluster({"worker": ["127.0.0.1:1"], "ps": []}, timeout_s=0.2, who="BSPStrategy")
Traceback (most recent call last):
...
tf_hetero.cluster.reach.ClusterUnreachableError: BSPStrategy: 1 of 1 worker/PS tasks did not answer within 0.2 s: worker 0 at 127.0.0.1:1. Fix: start each with its TF_CONFIG (`tf-hetero launch` on its host; `tf-hetero tfconfig` prints them for a TFJob), check the address and that the port is reachable from here, or wait longer (connect_timeout_s=..., or TF_HETERO_CONNECT_TIMEOUT_S).
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from typing import Mapping, Sequence

from tf_hetero import env as _env

__all__ = ["wait_for_cluster", "ClusterUnreachableError", "connect_timeout",
           "DEFAULT_CONNECT_TIMEOUT_S", "CONNECT_TIMEOUT_ENV", "answers", "call_bounded"]

#: Seconds a strategy waits for the cluster's servers before giving up (a cold start of six
#: server processes is ~15 s on the 2-core dev machine; Kubernetes pods can take minutes).
DEFAULT_CONNECT_TIMEOUT_S = 300.0
#: Overrides :data:`DEFAULT_CONNECT_TIMEOUT_S` for every strategy in the process.
CONNECT_TIMEOUT_ENV = _env.CONNECT_TIMEOUT_S


class ClusterUnreachableError(ConnectionError):
    """Some worker or PS task did not accept a connection in time."""


def connect_timeout(value: float | None, who: str) -> float:
    """The timeout to use: ``value``, else :data:`CONNECT_TIMEOUT_ENV`, else the default;
    checked (a clear error naming ``who`` and the value).

    >>> connect_timeout(5, "BSPStrategy")
    5.0
    >>> connect_timeout(-1, "BSPStrategy")
    Traceback (most recent call last):
    ...
    ValueError: BSPStrategy(connect_timeout_s=-1): need seconds > 0 (the bound on waiting for the cluster's servers).
    """
    source = f"{who}(connect_timeout_s={value!r})"
    if value is None:
        env = _env.connect_timeout_s()
        if env is None:
            return DEFAULT_CONNECT_TIMEOUT_S
        source, value = f"{CONNECT_TIMEOUT_ENV}={env!r}", env
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{source}: need seconds > 0 (the bound on waiting for the cluster's "
                         "servers).")
    return seconds


def answers(address: str, timeout_s: float = 1.0) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout_s``."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def call_bounded(fn, timeout_s: float, name: str) -> tuple[bool, BaseException | None]:
    """Calls ``fn()`` on a daemon thread named ``name`` and waits for it at most
    ``timeout_s``: ``(ended, error)``, ``error`` what ``fn`` raised (None when it returned or
    has not ended). For TensorFlow calls without a timeout of their own
    (``update_server_def`` waits for every task to answer); past the bound the thread is
    left to end by itself."""
    raised: list[BaseException] = []

    def call():
        try:
            fn()
        except BaseException as e:  # pylint: disable=broad-except
            raised.append(e)

    thread = threading.Thread(target=call, daemon=True, name=name)
    thread.start()
    thread.join(timeout_s)
    ended = not thread.is_alive()
    return ended, (raised[0] if ended and raised else None)


def wait_for_cluster(cluster: Mapping[str, Sequence[str]] | object, timeout_s: float,
                     who: str = "tf-hetero", report_every_s: float = 15.0,
                     out=None) -> None:
    """Returns once every worker and PS task of ``cluster`` (a cluster resolver, a
    ``tf.train.ClusterSpec`` or ``{"worker": [...], "ps": [...]}``) accepts a connection;
    raises :class:`ClusterUnreachableError` after ``timeout_s``. Prints the tasks still
    missing every ``report_every_s`` seconds (to ``out``, stderr by default)."""
    spec = cluster
    if hasattr(spec, "cluster_spec"):
        spec = spec.cluster_spec()
    if hasattr(spec, "as_dict"):
        spec = spec.as_dict()
    tasks = []
    for role in ("worker", "ps"):
        addresses = spec.get(role, ())
        items = addresses.items() if isinstance(addresses, Mapping) else enumerate(addresses)
        tasks += [(role, int(i), a) for i, a in items]
    start = time.monotonic()
    next_report = start + report_every_s
    pending = tasks
    while True:
        pending = [t for t in pending if not answers(t[2])]
        if not pending:
            return
        now = time.monotonic()
        missing = ", ".join(f"{role} {i} at {a}" for role, i, a in pending)
        if now - start >= timeout_s:
            raise ClusterUnreachableError(
                f"{who}: {len(pending)} of {len(tasks)} worker/PS tasks did not answer within "
                f"{timeout_s:g} s: {missing}. Fix: start each with its TF_CONFIG (`tf-hetero "
                "launch` on its host; `tf-hetero tfconfig` prints them for a TFJob), check the "
                "address and that the port is reachable from here, or wait longer "
                f"(connect_timeout_s=..., or {CONNECT_TIMEOUT_ENV}).")
        if now >= next_report:
            print(f"[tf-hetero] {who}: waiting for {missing} ({now - start:.0f} s of "
                  f"{timeout_s:g} s)", file=out or sys.stderr, flush=True)
            next_report = now + report_every_s
        time.sleep(min(0.2, max(0.0, timeout_s - (now - start))))
