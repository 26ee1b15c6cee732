"""Serving a TF_CONFIG role: the single-binary pattern of the TensorFlow PS docs.

Every process of a cluster runs the same program; ``TF_CONFIG`` says what it is:

- ``worker`` / ``ps``: start a ``tf.distribute.Server`` and block until SIGTERM/SIGINT,
  then exit 0;
- ``chief``: run the training program (the coordinator);
- ``evaluator``: accepted, but not used for training by this library (reported, exit 0).

>>> import tf_hetero                                    # doctest: +SKIP
>>> def main():
...     strategy = tf.distribute.ParameterServerStrategy(tf_hetero.cluster_resolver())
...     ...                                             # build, compile, model.fit
>>> tf_hetero.run(main)                                 # serves on workers/ps, trains on chief

TF_CONFIG is validated (:mod:`tf_hetero.cluster.tf_config`) before any server starts.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Callable, TypeVar

from tf_hetero import env as _env
from tf_hetero.cluster.tf_config import TFConfig, parse_tf_config

__all__ = ["serve", "run", "cluster_resolver", "serve_unless_chief"]

log = logging.getLogger("tf_hetero")
T = TypeVar("T")

#: Seconds between checks for a stop signal while a server blocks. A server blocks in Python,
#: not in ``server.join()`` (C++), so that SIGTERM handlers run promptly.
_POLL_S = 0.5


def serve(config: TFConfig | None = None, *, stop_event: threading.Event | None = None) -> int:
    """Starts this task's server (worker or ps) and blocks until SIGTERM/SIGINT.

    Returns 0 (used as the process exit code). ``stop_event`` lets tests stop it in-process.
    """
    config = config or parse_tf_config()
    role, index = config.task.role, config.task.index
    if role not in ("worker", "ps"):
        raise ValueError(f"serve() runs worker and ps tasks; TF_CONFIG task type is {role!r}. "
                         "Fix: run the training program for the chief (tf_hetero.run does both).")
    import tensorflow as tf

    stop = stop_event or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    server = tf.distribute.Server(
        tf.train.ClusterSpec({k: list(v) for k, v in config.cluster.items()}),
        job_name=role, task_index=index, protocol=config.rpc_layer, start=True)
    print(f"tf-hetero: {role} {index} serving on {config.task.address} (pid {os.getpid()})",
          flush=True)
    while not stop.wait(_POLL_S):
        pass
    print(f"tf-hetero: {role} {index} stopping", flush=True)
    del server  # TF servers cannot be stopped; the process exit closes the port.
    return 0


def without_keras() -> None:
    """Keeps Keras out of a server process that has not imported TensorFlow yet.
    ``import tensorflow`` imports Keras 3's optimizers eagerly (registrations for Python code
    that saves models), about a quarter of the import's CPU; a worker or PS server runs only
    the functions the chief sends it and never uses them, and TensorFlow's import catches the
    ``ImportError`` (docs/TF_INTERNALS.md, "What import tensorflow imports", with the
    measured start-up). Only in ``tf-hetero launch``'s own process and the fork server
    (:mod:`~tf_hetero.cluster.forkserver`), never in a program that serves through
    :func:`run` (which may use Keras)."""
    sys.modules.setdefault("keras", None)


def exit_without_tf_teardown(code: int):
    """Flushes and exits at once: a worker or PS task's TensorFlow teardown would wait on its
    server, which TensorFlow cannot stop. (A chief needs no such exit: ``LocalCluster.stop``
    detaches it from the servers before they stop.)"""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cluster_resolver(config: TFConfig | None = None):
    """A ``TFConfigClusterResolver`` for this process, after validating ``TF_CONFIG``."""
    import tensorflow as tf

    config = config or parse_tf_config()
    _env.set_var(_env.TF_CONFIG, config.to_json())
    return tf.distribute.cluster_resolver.TFConfigClusterResolver()


def serve_unless_chief(config: TFConfig, exit: Callable[[int], None]) -> bool:  # pylint: disable=redefined-builtin
    """The one role dispatch (``tf-hetero launch`` and :func:`run`): a worker or ps task
    serves, then calls ``exit(code)``; an evaluator is reported unused (False); the chief
    gets True and runs the training program."""
    if config.task.role in ("worker", "ps"):
        exit(serve(config))
    if config.task.role == "evaluator":
        print("tf-hetero: TF_CONFIG task type 'evaluator' is accepted but not used for "
              "training by tf-hetero; nothing to do.", flush=True)
        return False
    return True


def run(main: Callable[..., T], *args, **kwargs) -> T | None:
    """Runs ``main(*args, **kwargs)`` on the chief; serves (and exits) on workers and PS.

    On a worker or ps task this never returns: the process exits when it is told to stop.
    On an evaluator it prints that evaluators are not used and returns ``None``.
    """
    if not serve_unless_chief(parse_tf_config(), sys.exit):
        return None
    return main(*args, **kwargs)
