"""Parse and validate ``TF_CONFIG`` for a ParameterServerStrategy cluster.

``TF_CONFIG`` is the JSON environment variable that ``tf.distribute`` (and the
Kubeflow TFJob operator) use to tell each process which cluster it belongs to
and which task it is.  A mistake in it usually shows up much later, as a server
that hangs or a gRPC error with no hint of the cause.  This module checks it up
front, *before* any server starts, and raises :class:`TFConfigError` with a
one-line message that names the field, the value received and the fix.

It is pure Python (it does not import TensorFlow).

Example:

>>> import json
>>> text = json.dumps({
...     "cluster": {
...         "chief": ["localhost:2222"],
...         "worker": ["localhost:2223", "localhost:2224"],
...         "ps": ["localhost:2225"],
...     },
...     "task": {"type": "worker", "index": 1},
... })
>>> config = parse_tf_config(text)
>>> config.task
TaskSpec(role='worker', index=1, address='localhost:2224')
>>> config.num_workers, config.num_ps, config.chief_address
(2, 1, 'localhost:2222')
>>> config.with_task("ps", 0).task.address
'localhost:2225'
>>> parse_tf_config(config.to_json()) == config
True
>>> try:
...     parse_tf_config(text.replace('"index": 1', '"index": 2'))
... except TFConfigError as err:
...     print(err)
TF_CONFIG["task"]["index"] is 2, but cluster job "worker" has only 2 tasks (indices 0-1). Fix: use an index from 0 to 1.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping, Sequence
from typing import Any

from tf_hetero import env as _env

__all__ = [
    "ROLES",
    "TFConfig",
    "TFConfigError",
    "TaskSpec",
    "make_tf_config",
    "parse_tf_config",
    "validate_cluster",
]

#: The task roles (TF "job names") a ParameterServerStrategy cluster may use.
ROLES = ("chief", "worker", "ps", "evaluator")

_CLUSTER = 'TF_CONFIG["cluster"]'
_TASK = 'TF_CONFIG["task"]'
_MAX_SHOWN = 80
_EXAMPLE = (
    '{"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"], '
    '"ps": ["host2:2222"]}, "task": {"type": "worker", "index": 0}}'
)


class TFConfigError(ValueError):
    """TF_CONFIG is missing or invalid; the message names the field, the value and the fix."""


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """The task this process runs: its role, its index in that job and its address.

    ``address`` is ``""`` for an evaluator that is not listed in the cluster.
    """

    role: str
    index: int
    address: str


@dataclasses.dataclass(frozen=True)
class TFConfig:
    """A validated TF_CONFIG.  Build it with :func:`parse_tf_config`.

    ``cluster`` maps each job name to its addresses and is read-only.  Creating
    a ``TFConfig`` directly runs the same checks as :func:`parse_tf_config`.
    """

    cluster: Mapping[str, tuple[str, ...]] = dataclasses.field(hash=False)
    task: TaskSpec
    rpc_layer: str = "grpc"

    def __post_init__(self) -> None:
        jobs, address = _validate(self.cluster, self.task.role, self.task.index, self.rpc_layer)
        if self.task.address != address:
            raise TFConfigError(
                f"TaskSpec.address is {_show(self.task.address)}, but "
                f"{_CLUSTER}[{_show(self.task.role)}][{self.task.index}] is {_show(address)}. "
                "Fix: build the config with parse_tf_config() or TFConfig.with_task(), "
                "which fill in the address from the cluster."
            )
        object.__setattr__(self, "cluster", types.MappingProxyType(jobs))

    @property
    def num_workers(self) -> int:
        """Number of tasks in the ``worker`` job."""
        return len(self.cluster["worker"])

    @property
    def num_ps(self) -> int:
        """Number of tasks in the ``ps`` job."""
        return len(self.cluster["ps"])

    @property
    def chief_address(self) -> str:
        """The ``host:port`` of the chief (the ParameterServerStrategy coordinator)."""
        return self.cluster["chief"][0]

    @property
    def is_training_role(self) -> bool:
        """False for an evaluator, which does not take part in training."""
        return self.task.role != "evaluator"

    def to_json(self) -> str:
        """The TF_CONFIG JSON string for this config; ``parse_tf_config`` reads it back."""
        return json.dumps(
            {
                "cluster": {job: list(addresses) for job, addresses in self.cluster.items()},
                "task": {"type": self.task.role, "index": self.task.index},
                "rpc_layer": self.rpc_layer,
            }
        )

    def with_task(self, role: str, index: int) -> TFConfig:
        """The same cluster seen from another task (validated)."""
        jobs, address = _validate(self.cluster, role, index, self.rpc_layer)
        return TFConfig(jobs, TaskSpec(role, index, address), self.rpc_layer)


def parse_tf_config(
    text: str | Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None
) -> TFConfig:
    """Parse and validate TF_CONFIG.

    ``text`` is the JSON string; ``None`` reads ``env["TF_CONFIG"]``; a mapping
    is taken as already-decoded JSON.  Unknown top-level keys (such as
    ``"environment"``) and unknown task keys are ignored.

    Raises:
        TFConfigError: if TF_CONFIG is unset, not JSON, or describes an invalid cluster.
    """
    if text is None:
        text = _env.tf_config(env)
        if text is None:
            raise TFConfigError(
                "TF_CONFIG is not set (the environment variable is missing). "
                f"Fix: export TF_CONFIG='{_EXAMPLE}' in every task, "
                "or use `tf-hetero run` to start a local cluster."
            )
    config = _decode(text) if isinstance(text, str) else text
    if not isinstance(config, Mapping):
        raise TFConfigError(
            f"TF_CONFIG is {_described(config)}, but must be a JSON object "
            'with "cluster" and "task" keys. '
            f"Fix: set it to an object such as {_EXAMPLE}."
        )
    cluster = _require_key(config, "cluster", "TF_CONFIG")
    _check_cluster_is_object(cluster, _CLUSTER)
    task = _require_key(config, "task", "TF_CONFIG")
    if not isinstance(task, Mapping):
        raise TFConfigError(
            f"{_TASK} is {_described(task)}, but must be an object. "
            'Fix: use {"type": "worker", "index": 0}.'
        )
    role = _require_key(task, "type", _TASK)
    index = _require_key(task, "index", _TASK)
    rpc_layer = config.get("rpc_layer", "grpc")
    jobs, address = _validate(cluster, role, index, rpc_layer)
    return TFConfig(jobs, TaskSpec(role, index, address), rpc_layer)


def validate_cluster(
    cluster: Mapping[str, Sequence[str]], *, name: str = _CLUSTER
) -> dict[str, tuple[str, ...]]:
    """Check a cluster spec on its own and return it as ``{job: (address, ...)}``.

    ``name`` is how the cluster is called in error messages.

    Raises:
        TFConfigError: on an unknown job name, a bad address list or address, a
            duplicate address, a missing chief/worker/ps job, or more than one chief
            or evaluator.
    """
    jobs = _check_cluster_shape(cluster, name)
    _check_required_jobs(jobs, name)
    return jobs


def make_tf_config(cluster: Mapping[str, Sequence[str]], role: str, index: int) -> str:
    """Build a validated TF_CONFIG JSON string for task ``(role, index)`` of ``cluster``.

    >>> make_tf_config({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}, "ps", 0)
    '{"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}, "task": {"type": "ps", "index": 0}, "rpc_layer": "grpc"}'
    """
    jobs, address = _validate(cluster, role, index, "grpc")
    return TFConfig(jobs, TaskSpec(role, index, address)).to_json()


# --------------------------------------------------------------------------- checks


def _validate(cluster: Any, role: Any, index: Any, rpc_layer: Any) -> tuple[dict[str, tuple[str, ...]], str]:
    """All checks; returns the normalized cluster and this task's address.

    The task is checked before the required jobs, so a task whose job is missing
    from the cluster is reported as such.
    """
    jobs = _check_cluster_shape(cluster, _CLUSTER)
    _check_role(role, f'{_TASK}["type"] is {_show(role)}')
    _check_index(index, f'{_TASK}["index"]')
    address = _task_address(jobs, role, index)
    _check_required_jobs(jobs, _CLUSTER)
    _check_rpc_layer(rpc_layer)
    return jobs, address


def _decode(text: str) -> Any:
    if not text.strip():
        raise TFConfigError(
            f"TF_CONFIG is {_show_text(text)} (empty), but must be a JSON object. "
            f"Fix: set it to an object such as {_EXAMPLE}, "
            "or use `tf-hetero run` to start a local cluster."
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise TFConfigError(
            f"TF_CONFIG is not valid JSON: {err.msg} at line {err.lineno} column {err.colno} "
            f"(char {err.pos}); received {_show_text(text)}. "
            "Fix: use double quotes around keys and strings, no trailing commas, "
            "and single quotes around the whole value in the shell."
        ) from None


def _require_key(obj: Mapping[str, Any], key: str, field: str) -> Any:
    if key in obj:
        return obj[key]
    received = ", ".join(_show(k) for k in obj) or "none"
    fixes = {
        "cluster": 'add "cluster": {"chief": [...], "worker": [...], "ps": [...]}',
        "task": 'add "task": {"type": "worker", "index": 0} (this task\'s role and index)',
        "type": 'add "type": one of "chief", "worker", "ps", "evaluator" (TF reads the role from "type")',
        "index": 'add "index": 0 (this task\'s position in its job\'s address list)',
    }
    raise TFConfigError(f'{field} has no "{key}" key (keys received: {received}). Fix: {fixes[key]}.')


def _check_role(role: Any, subject: str) -> None:
    """``subject`` names the field and the value, e.g. 'TF_CONFIG["task"]["type"] is "master"'."""
    if role in ROLES:
        return
    allowed = ", ".join(_show(r) for r in ROLES)
    if role == "master":
        fix = '"master" is the TF1 name for the chief; rename it to "chief"'
    elif isinstance(role, str) and role.strip().lower() in ROLES:
        fix = f"roles are lowercase without spaces; use {_show(role.strip().lower())}"
    else:
        fix = f"use one of {allowed}"
    raise TFConfigError(f"{subject}, which is not a known role (allowed: {allowed}). Fix: {fix}.")


def _check_index(index: Any, field: str) -> None:
    if isinstance(index, bool) or not isinstance(index, int):
        if isinstance(index, str) and index.strip().isdigit():
            fix = f'write it as a JSON number without quotes: "index": {int(index)}'
        else:
            fix = 'use a JSON integer such as "index": 0'
        raise TFConfigError(
            f"{field} is {_described(index)}, but must be a non-negative integer. Fix: {fix}."
        )
    if index < 0:
        raise TFConfigError(f"{field} is {index}, but must be a non-negative integer. Fix: use 0 or more.")


def _task_address(jobs: Mapping[str, tuple[str, ...]], role: str, index: int) -> str:
    if role not in jobs:
        if role == "evaluator":  # TF allows the evaluator outside the cluster.
            return ""
        listed = ", ".join(_show(j) for j in jobs) or "none"
        raise TFConfigError(
            f'{_TASK}["type"] is {_show(role)}, but {_CLUSTER} has no {_show(role)} job '
            f"(jobs: {listed}). Fix: add this task's address to {_CLUSTER}[{_show(role)}]."
        )
    size = len(jobs[role])
    if index >= size:
        if size == 1:
            have, fix = "only 1 task (index 0)", "use index 0"
        else:
            have, fix = f"only {size} tasks (indices 0-{size - 1})", f"use an index from 0 to {size - 1}"
        raise TFConfigError(f'{_TASK}["index"] is {index}, but cluster job {_show(role)} has {have}. Fix: {fix}.')
    return jobs[role][index]


def _check_cluster_is_object(cluster: Any, name: str) -> None:
    if not isinstance(cluster, Mapping):
        raise TFConfigError(
            f"{name} is {_described(cluster)}, but must be an object "
            "mapping job names to address lists. "
            'Fix: use {"chief": ["host:port"], "worker": ["host:port", ...], "ps": ["host:port", ...]}.'
        )


def _check_cluster_shape(cluster: Any, name: str) -> dict[str, tuple[str, ...]]:
    _check_cluster_is_object(cluster, name)
    jobs: dict[str, tuple[str, ...]] = {}
    for job, addresses in cluster.items():
        _check_role(job, f"{name} has job {_show(job)}")
        jobs[job] = _check_job(addresses, f"{name}[{_show(job)}]")
    _check_unique_addresses(jobs, name)
    return jobs


def _check_job(addresses: Any, field: str) -> tuple[str, ...]:
    if isinstance(addresses, str):
        raise TFConfigError(
            f"{field} is {_show(addresses)} (a string), but must be a list of "
            f'"host:port" strings. Fix: wrap it in a list: [{_show(addresses)}].'
        )
    if isinstance(addresses, Mapping):
        raise TFConfigError(
            f"{field} is {_show(addresses)} (an object), but must be a list of "
            '"host:port" strings. Fix: list the addresses in task-index order.'
        )
    if not isinstance(addresses, Sequence):
        raise TFConfigError(
            f"{field} is {_described(addresses)}, but must be a list of "
            '"host:port" strings. Fix: use a list such as ["localhost:2222"].'
        )
    if not addresses:
        raise TFConfigError(
            f'{field} is [] (empty), but must list at least one "host:port" address. '
            "Fix: add the address of each task in this job."
        )
    for i, address in enumerate(addresses):
        _check_address(address, f"{field}[{i}]")
    return tuple(addresses)


def _check_address(address: Any, field: str) -> None:
    def bad(problem: str, fix: str) -> TFConfigError:
        return TFConfigError(f"{field} is {_show(address)}, {problem}. Fix: {fix}.")

    if not isinstance(address, str):
        raise TFConfigError(
            f'{field} is {_described(address)}, but must be a "host:port" string. '
            'Fix: quote it, e.g. "localhost:2222".'
        )
    if "://" in address:
        raise bad("but must not include a scheme", 'remove the scheme, e.g. "host:2222" (rpc_layer sets the protocol)')
    if any(c.isspace() for c in address):
        raise bad("but contains whitespace", "remove the spaces")
    if address.startswith("["):  # IPv6: "[::1]:2222"
        host, sep, port = address[1:].partition("]:")
        if not sep or not host:
            raise bad('but a bracketed IPv6 address must look like "[::1]:2222"', "write it as [IPv6]:port")
    else:
        host, sep, port = address.rpartition(":")
        if not sep:
            raise bad("but has no port", f'append the port, e.g. "{address}:2222"')
        if ":" in host:
            raise bad("which looks like an IPv6 address without brackets", f'use "[{host}]:{port}"')
        if not host:
            raise bad("but has no host", f'put the host name before the port, e.g. "localhost{address}"')
    if not (port.isascii() and port.isdigit()):
        raise bad(f"but its port {_show(port)} is not a number", 'use a numeric port, e.g. "localhost:2222"')
    if not 1 <= int(port) <= 65535:
        raise bad(f"but its port {int(port)} is outside 1-65535", "use a port from 1 to 65535")


def _check_unique_addresses(jobs: Mapping[str, tuple[str, ...]], name: str) -> None:
    seen: dict[str, str] = {}
    for job, addresses in jobs.items():
        for i, address in enumerate(addresses):
            field = f"{name}[{_show(job)}][{i}]"
            if address in seen:
                raise TFConfigError(
                    f"{seen[address]} and {field} are both {_show(address)}, but every task needs "
                    "its own address. Fix: give one of them another host or port."
                )
            seen[address] = field


def _check_required_jobs(jobs: Mapping[str, tuple[str, ...]], name: str) -> None:
    listed = ", ".join(_show(j) for j in jobs) or "none"
    required = {
        "chief": 'add "chief": ["host:port"]; ParameterServerStrategy runs its coordinator on the chief',
        "worker": 'add "worker": ["host:port", ...] with at least one worker',
        "ps": 'add "ps": ["host:port", ...] with at least one parameter server',
    }
    for job, fix in required.items():
        if job not in jobs:
            raise TFConfigError(f"{name} has no {_show(job)} job (jobs received: {listed}). Fix: {fix}.")
    for job in ("chief", "evaluator"):
        if len(jobs.get(job, ())) > 1:
            raise TFConfigError(
                f"{name}[{_show(job)}] is {_show(list(jobs[job]))} ({len(jobs[job])} tasks), but the "
                f"{_show(job)} job must have exactly 1 task. Fix: keep one address"
                + (' and move the others to "worker".' if job == "chief" else ".")
            )


def _check_rpc_layer(rpc_layer: Any) -> None:
    if not isinstance(rpc_layer, str) or not rpc_layer.strip():
        raise TFConfigError(
            f'TF_CONFIG["rpc_layer"] is {_described(rpc_layer)}, but must be a '
            'non-empty string. Fix: use "grpc" or remove the key.'
        )


# --------------------------------------------------------------------------- display


def _show(value: Any) -> str:
    """A one-line JSON-like rendering of ``value``, cut to about 80 characters."""

    def fallback(obj: Any) -> Any:
        return dict(obj) if isinstance(obj, Mapping) else repr(obj)

    try:
        shown = json.dumps(value, default=fallback)
    except (TypeError, ValueError):  # e.g. non-string keys, circular references
        shown = json.dumps(repr(value))
    return shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 3] + "..."


def _show_text(text: str) -> str:
    """The raw TF_CONFIG text on one line (newlines escaped), cut to about 80 characters."""
    return repr(text) if len(text) <= _MAX_SHOWN else repr(text[:_MAX_SHOWN]) + "..."


def _described(value: Any) -> str:
    """``value`` followed by its JSON kind, e.g. '"0" (a string)'; null needs no kind."""
    return "null" if value is None else f"{_show(value)} ({_kind(value)})"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a floating-point number"
    if isinstance(value, str):
        return "an empty string" if not value else "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"
