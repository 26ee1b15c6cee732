"""Configuration from the environment: the one module that reads (and sets) it.

Every variable tf-hetero reads has one accessor here, and an explicit argument always wins
over it (the callers pass theirs first). ``env`` arguments take a mapping in place of
``os.environ`` (tests, the environment of a process about to be started).

============================  ====================================================  ============
variable                      meaning                                               read by
============================  ====================================================  ============
``TF_CONFIG``                 the cluster and this task's role (JSON)               cluster
``TF_HETERO_PROFILE``         the heterogeneity profile ``tf-hetero run`` exported  emulation,
                                                                                    strategies
``TF_HETERO_TF_LOGS``         ``1``: show TensorFlow's C++ log lines                tflogs
``TF_HETERO_CONNECT_TIMEOUT_S``  seconds to wait for the cluster's servers          cluster
``TF_CPP_MIN_LOG_LEVEL``      TensorFlow's own (set quiet unless logs are wanted)   tflogs
============================  ====================================================  ============

>>> profile_spec({"TF_HETERO_PROFILE": "slow=3:4"})
'slow=3:4'
>>> tf_logs_wanted({"TF_HETERO_TF_LOGS": "yes"}), tf_logs_wanted({})
(True, False)
"""

from __future__ import annotations

import os
from typing import Mapping, MutableMapping

__all__ = ["TF_CONFIG", "PROFILE", "TF_LOGS", "CONNECT_TIMEOUT_S", "TF_CPP_MIN_LOG_LEVEL",
           "tf_config", "profile_spec", "tf_logs_wanted", "connect_timeout_s",
           "tf_cpp_min_log_level", "copy", "replace", "set_var", "unset_var"]

TF_CONFIG = "TF_CONFIG"
PROFILE = "TF_HETERO_PROFILE"
TF_LOGS = "TF_HETERO_TF_LOGS"
CONNECT_TIMEOUT_S = "TF_HETERO_CONNECT_TIMEOUT_S"
TF_CPP_MIN_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"


def _get(name: str, env: Mapping[str, str] | None) -> str | None:
    return (os.environ if env is None else env).get(name)


def tf_config(env: Mapping[str, str] | None = None) -> str | None:
    """``TF_CONFIG``'s JSON text (``None`` when unset)."""
    return _get(TF_CONFIG, env)


def profile_spec(env: Mapping[str, str] | None = None) -> str | None:
    """The profile spec ``tf-hetero run --profile`` exported (``None``: uniform)."""
    return _get(PROFILE, env)


def tf_logs_wanted(env: Mapping[str, str] | None = None) -> bool:
    """True if the user asked for TensorFlow's logs (``TF_HETERO_TF_LOGS``)."""
    return (_get(TF_LOGS, env) or "").strip().lower() in ("1", "true", "yes", "on")


def connect_timeout_s(env: Mapping[str, str] | None = None) -> str | None:
    """``TF_HETERO_CONNECT_TIMEOUT_S`` as given (checked by its reader, which names it)."""
    return _get(CONNECT_TIMEOUT_S, env)


def tf_cpp_min_log_level(env: Mapping[str, str] | None = None) -> str | None:
    return _get(TF_CPP_MIN_LOG_LEVEL, env)


def copy() -> dict[str, str]:
    """This process's environment, to start another process with."""
    return dict(os.environ)


def replace(env: Mapping[str, str]) -> None:
    """Makes ``env`` this process's whole environment (a forked server's: the environment it
    would have been started with)."""
    os.environ.clear()
    os.environ.update(env)


def set_var(name: str, value: str, env: MutableMapping[str, str] | None = None) -> None:
    """Sets ``name`` in ``env`` (default: this process, e.g. ``TF_CONFIG`` before TensorFlow
    reads it)."""
    (os.environ if env is None else env)[name] = value


def unset_var(name: str, env: MutableMapping[str, str] | None = None) -> None:
    (os.environ if env is None else env).pop(name, None)
