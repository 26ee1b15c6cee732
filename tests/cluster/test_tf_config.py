"""Specification of TF_CONFIG parsing and validation (pure Python, no TensorFlow)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from tf_hetero.cluster.tf_config import (
    TaskSpec,
    TFConfig,
    TFConfigError,
    make_tf_config,
    parse_tf_config,
    validate_cluster,
)

# A valid cluster: 1 chief, 4 workers, 2 parameter servers.
CLUSTER = {
    "chief": ["localhost:2222"],
    "worker": ["localhost:2223", "localhost:2224", "localhost:2225", "localhost:2226"],
    "ps": ["localhost:2227", "localhost:2228"],
}
WORKER_0 = {"type": "worker", "index": 0}


def cluster_with(**jobs):
    """CLUSTER with some jobs replaced; a job set to None is removed."""
    cluster = {**CLUSTER, **jobs}
    return {job: addresses for job, addresses in cluster.items() if addresses is not None}


def tf_config_json(cluster=CLUSTER, task=WORKER_0, **extra) -> str:
    return json.dumps({"cluster": cluster, "task": task, **extra})


def message(*parts: str) -> str:
    """An anchored regex: the literal parts in order, all on one line."""
    return "^" + ".*".join(re.escape(part) for part in parts) + r"[^\n]*$"


def case(given, *parts, id):
    return pytest.param(given, message(*parts), id=id)


# --------------------------------------------------------------------------- invalid inputs, by check

UNSET_OR_EMPTY = [
    case(None, "TF_CONFIG is not set", "Fix: export TF_CONFIG=", "use `tf-hetero run`", id="unset"),
    case("", "TF_CONFIG is '' (empty)", "Fix:", "use `tf-hetero run`", id="empty"),
    case("  \n", "TF_CONFIG is '  \\n' (empty)", "Fix:", id="blank"),
]

MALFORMED_JSON = [
    case(
        "{cluster: {}}",
        "TF_CONFIG is not valid JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 2 (char 1); received '{cluster: {}}'",
        "Fix: use double quotes",
        id="unquoted-key",
    ),
    case(
        '{"cluster": {}, }',
        "TF_CONFIG is not valid JSON:",
        """(char 16); received '{"cluster": {}, }'.""",
        "Fix: use double quotes around keys and strings, no trailing commas",
        id="trailing-comma",
    ),
]

NOT_AN_OBJECT = [
    case("[1, 2]", "TF_CONFIG is [1, 2] (a list), but must be a JSON object", "Fix:", id="list"),
    case('"worker"', 'TF_CONFIG is "worker" (a string), but must be a JSON object', "Fix:", id="string"),
    case("null", "TF_CONFIG is null, but must be a JSON object", "Fix:", id="null"),
]

BAD_CLUSTER = [
    case(
        json.dumps({"task": WORKER_0}),
        'TF_CONFIG has no "cluster" key (keys received: "task")',
        'Fix: add "cluster":',
        id="missing-cluster",
    ),
    case(
        tf_config_json(cluster=["localhost:2222"]),
        'TF_CONFIG["cluster"] is ["localhost:2222"] (a list), but must be an object',
        "Fix:",
        id="cluster-not-object",
    ),
    case(
        tf_config_json(cluster=cluster_with(worker="localhost:2223")),
        'TF_CONFIG["cluster"]["worker"] is "localhost:2223" (a string), but must be a list',
        'Fix: wrap it in a list: ["localhost:2223"].',
        id="job-is-string",
    ),
    case(
        tf_config_json(cluster=cluster_with(worker={"0": "localhost:2223"})),
        'TF_CONFIG["cluster"]["worker"] is {"0": "localhost:2223"} (an object), but must be a list',
        "Fix: list the addresses in task-index order.",
        id="job-is-object",
    ),
    case(
        tf_config_json(cluster=cluster_with(worker=[])),
        'TF_CONFIG["cluster"]["worker"] is [] (empty), but must list at least one',
        "Fix:",
        id="job-is-empty",
    ),
    case(
        tf_config_json(cluster=cluster_with(chief=[2222])),
        'TF_CONFIG["cluster"]["chief"][0] is 2222 (an integer), but must be a "host:port" string',
        'Fix: quote it, e.g. "localhost:2222".',
        id="address-not-string",
    ),
    case(
        tf_config_json(cluster={**CLUSTER, "ps": None}),
        'TF_CONFIG["cluster"]["ps"] is null, but must be a list',
        "Fix:",
        id="job-is-null",
    ),
]

BAD_TASK = [
    case(
        json.dumps({"cluster": CLUSTER}),
        'TF_CONFIG has no "task" key (keys received: "cluster")',
        'Fix: add "task": {"type": "worker", "index": 0}',
        id="missing-task",
    ),
    case(
        tf_config_json(task="worker"),
        'TF_CONFIG["task"] is "worker" (a string), but must be an object',
        "Fix:",
        id="task-not-object",
    ),
    case(
        tf_config_json(task={"role": "worker", "index": 0}),
        'TF_CONFIG["task"] has no "type" key (keys received: "role", "index")',
        'Fix: add "type": one of "chief", "worker", "ps", "evaluator"',
        id="missing-type",
    ),
    case(
        tf_config_json(task={"type": "worker"}),
        'TF_CONFIG["task"] has no "index" key (keys received: "type")',
        'Fix: add "index": 0',
        id="missing-index",
    ),
]

BAD_INDEX = [
    case(
        tf_config_json(task={"type": "worker", "index": "1"}),
        'TF_CONFIG["task"]["index"] is "1" (a string), but must be a non-negative integer',
        'Fix: write it as a JSON number without quotes: "index": 1.',
        id="int-valued-string",
    ),
    case(
        tf_config_json(task={"type": "worker", "index": "one"}),
        'TF_CONFIG["task"]["index"] is "one" (a string), but must be a non-negative integer',
        'Fix: use a JSON integer such as "index": 0.',
        id="string",
    ),
    case(
        tf_config_json(task={"type": "worker", "index": True}),
        'TF_CONFIG["task"]["index"] is true (a boolean), but must be a non-negative integer',
        "Fix:",
        id="bool",
    ),
    case(
        tf_config_json(task={"type": "worker", "index": 1.0}),
        'TF_CONFIG["task"]["index"] is 1.0 (a floating-point number), but must be a non-negative integer',
        "Fix:",
        id="float",
    ),
    case(
        tf_config_json(task={"type": "worker", "index": None}),
        'TF_CONFIG["task"]["index"] is null, but must be a non-negative integer',
        "Fix:",
        id="null",
    ),
    case(
        tf_config_json(task={"type": "worker", "index": -1}),
        'TF_CONFIG["task"]["index"] is -1, but must be a non-negative integer',
        "Fix: use 0 or more.",
        id="negative",
    ),
]

UNKNOWN_ROLE = [
    case(
        tf_config_json(task={"type": "trainer", "index": 0}),
        'TF_CONFIG["task"]["type"] is "trainer", which is not a known role '
        '(allowed: "chief", "worker", "ps", "evaluator")',
        'Fix: use one of "chief", "worker", "ps", "evaluator".',
        id="task-type",
    ),
    case(
        tf_config_json(task={"type": "master", "index": 0}),
        'TF_CONFIG["task"]["type"] is "master", which is not a known role',
        'Fix: "master" is the TF1 name for the chief; rename it to "chief".',
        id="task-type-master",
    ),
    case(
        tf_config_json(task={"type": "Worker", "index": 0}),
        'TF_CONFIG["task"]["type"] is "Worker", which is not a known role',
        'Fix: roles are lowercase without spaces; use "worker".',
        id="task-type-capitalized",
    ),
    case(
        tf_config_json(task={"type": None, "index": 0}),
        'TF_CONFIG["task"]["type"] is null, which is not a known role',
        "Fix: use one of",
        id="task-type-null",
    ),
    case(
        tf_config_json(cluster={"master": ["localhost:2222"], **cluster_with(chief=None)}),
        'TF_CONFIG["cluster"] has job "master", which is not a known role',
        'Fix: "master" is the TF1 name for the chief; rename it to "chief".',
        id="cluster-job-master",
    ),
    case(
        tf_config_json(cluster=cluster_with(trainer=["localhost:3000"])),
        'TF_CONFIG["cluster"] has job "trainer", which is not a known role',
        "Fix: use one of",
        id="cluster-job",
    ),
]

INDEX_OUT_OF_RANGE = [
    case(
        tf_config_json(task={"type": "worker", "index": 4}),
        'TF_CONFIG["task"]["index"] is 4, but cluster job "worker" has only 4 tasks (indices 0-3). '
        "Fix: use an index from 0 to 3.",
        id="worker",
    ),
    case(
        tf_config_json(task={"type": "chief", "index": 1}),
        'TF_CONFIG["task"]["index"] is 1, but cluster job "chief" has only 1 task (index 0). Fix: use index 0.',
        id="chief",
    ),
]

MISSING_OR_OVERSIZED_JOB = [
    case(
        tf_config_json(cluster=cluster_with(ps=None)),
        'TF_CONFIG["cluster"] has no "ps" job (jobs received: "chief", "worker")',
        'Fix: add "ps": ["host:port", ...] with at least one parameter server.',
        id="no-ps",
    ),
    case(
        tf_config_json(cluster=cluster_with(worker=None), task={"type": "ps", "index": 0}),
        'TF_CONFIG["cluster"] has no "worker" job (jobs received: "chief", "ps")',
        'Fix: add "worker":',
        id="no-worker",
    ),
    case(
        tf_config_json(cluster=cluster_with(chief=None)),
        'TF_CONFIG["cluster"] has no "chief" job (jobs received: "worker", "ps")',
        'Fix: add "chief": ["host:port"]; ParameterServerStrategy runs its coordinator on the chief.',
        id="no-chief",
    ),
    case(
        tf_config_json(cluster=cluster_with(chief=["localhost:2222", "localhost:2229"])),
        'TF_CONFIG["cluster"]["chief"] is ["localhost:2222", "localhost:2229"] (2 tasks), '
        'but the "chief" job must have exactly 1 task',
        'Fix: keep one address and move the others to "worker".',
        id="two-chiefs",
    ),
    case(
        tf_config_json(cluster=cluster_with(evaluator=["localhost:2230", "localhost:2231"])),
        'TF_CONFIG["cluster"]["evaluator"] is ["localhost:2230", "localhost:2231"] (2 tasks), '
        'but the "evaluator" job must have exactly 1 task',
        "Fix: keep one address.",
        id="two-evaluators",
    ),
]

DUPLICATE_ADDRESS = [
    case(
        tf_config_json(cluster=cluster_with(ps=["localhost:2224", "localhost:2228"])),
        'TF_CONFIG["cluster"]["worker"][1] and TF_CONFIG["cluster"]["ps"][0] are both "localhost:2224"',
        "Fix: give one of them another host or port.",
        id="worker-and-ps",
    ),
    case(
        tf_config_json(cluster=cluster_with(worker=["localhost:2223", "localhost:2223"])),
        'TF_CONFIG["cluster"]["worker"][0] and TF_CONFIG["cluster"]["worker"][1] are both "localhost:2223"',
        "Fix:",
        id="same-job",
    ),
]


def bad_worker_address(address, *parts, id):
    given = tf_config_json(cluster=cluster_with(worker=[address]))
    return case(given, f'TF_CONFIG["cluster"]["worker"][0] is {json.dumps(address)}, ', *parts, id=id)


BAD_ADDRESS = [
    bad_worker_address("localhost", "but has no port", 'Fix: append the port, e.g. "localhost:2222".', id="no-port"),
    bad_worker_address("host:abc", 'but its port "abc" is not a number', "Fix: use a numeric port", id="port-abc"),
    bad_worker_address("host:", 'but its port "" is not a number', "Fix:", id="port-empty"),
    bad_worker_address("host:0", "but its port 0 is outside 1-65535", "Fix: use a port from 1 to 65535.", id="port-0"),
    bad_worker_address("host:65536", "but its port 65536 is outside 1-65535", "Fix:", id="port-65536"),
    bad_worker_address(":2222", "but has no host", 'Fix: put the host name before the port, e.g. "localhost:2222".', id="no-host"),
    bad_worker_address(
        "::1:2222",
        "which looks like an IPv6 address without brackets",
        'Fix: use "[::1]:2222".',
        id="ipv6-no-brackets",
    ),
    bad_worker_address("[::1]", 'but a bracketed IPv6 address must look like "[::1]:2222"', "Fix:", id="ipv6-no-port"),
    bad_worker_address("grpc://host:2222", "but must not include a scheme", 'Fix: remove the scheme', id="scheme"),
    bad_worker_address("host :2222", "but contains whitespace", "Fix: remove the spaces.", id="whitespace"),
]

TASK_ROLE_NOT_IN_CLUSTER = [
    case(
        tf_config_json(cluster=cluster_with(ps=None), task={"type": "ps", "index": 0}),
        'TF_CONFIG["task"]["type"] is "ps", but TF_CONFIG["cluster"] has no "ps" job (jobs: "chief", "worker")',
        'Fix: add this task\'s address to TF_CONFIG["cluster"]["ps"].',
        id="ps",
    ),
]

BAD_RPC_LAYER = [
    case(
        tf_config_json(rpc_layer=""),
        'TF_CONFIG["rpc_layer"] is "" (an empty string), but must be a non-empty string',
        'Fix: use "grpc" or remove the key.',
        id="empty",
    ),
    case(tf_config_json(rpc_layer=None), 'TF_CONFIG["rpc_layer"] is null, but', "Fix:", id="null"),
    case(tf_config_json(rpc_layer=1), 'TF_CONFIG["rpc_layer"] is 1 (an integer)', "Fix:", id="integer"),
]

ALL_BAD_INPUTS = (
    UNSET_OR_EMPTY
    + MALFORMED_JSON
    + NOT_AN_OBJECT
    + BAD_CLUSTER
    + BAD_TASK
    + BAD_INDEX
    + UNKNOWN_ROLE
    + INDEX_OUT_OF_RANGE
    + MISSING_OR_OVERSIZED_JOB
    + DUPLICATE_ADDRESS
    + BAD_ADDRESS
    + TASK_ROLE_NOT_IN_CLUSTER
    + BAD_RPC_LAYER
)


def parse(given):
    """parse_tf_config with an empty environment, so None means "TF_CONFIG unset"."""
    return parse_tf_config(given, env={})


@pytest.mark.parametrize("given, expected", UNSET_OR_EMPTY)
def test_rejects_unset_or_empty_tf_config_and_points_to_tf_hetero_run(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


def test_rejects_tf_config_environment_variable_that_is_empty():
    with pytest.raises(TFConfigError, match=message("TF_CONFIG is '' (empty)", "Fix:")):
        parse_tf_config(env={"TF_CONFIG": ""})


@pytest.mark.parametrize("given, expected", MALFORMED_JSON)
def test_rejects_malformed_json_with_the_error_position(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


def test_malformed_json_message_shows_at_most_80_characters_of_the_value():
    given = "{" + "x" * 500
    with pytest.raises(TFConfigError) as err:
        parse(given)
    shown = re.search(r"received (.*?)\. Fix: ", str(err.value)).group(1)
    assert shown == repr(given[:80]) + "..."


@pytest.mark.parametrize("given, expected", NOT_AN_OBJECT)
def test_rejects_top_level_that_is_not_a_json_object(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", BAD_CLUSTER)
def test_rejects_missing_or_malformed_cluster(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", BAD_TASK)
def test_rejects_missing_or_malformed_task(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", BAD_INDEX)
def test_rejects_task_index_that_is_not_a_non_negative_integer(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", UNKNOWN_ROLE)
def test_rejects_unknown_role_in_cluster_or_task(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", INDEX_OUT_OF_RANGE)
def test_rejects_task_index_out_of_range(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", MISSING_OR_OVERSIZED_JOB)
def test_rejects_cluster_without_chief_worker_and_ps_or_with_two_chiefs(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", DUPLICATE_ADDRESS)
def test_rejects_duplicate_addresses_naming_both_places(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", BAD_ADDRESS)
def test_rejects_address_without_valid_host_and_numeric_port(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", TASK_ROLE_NOT_IN_CLUSTER)
def test_rejects_task_whose_role_is_not_in_the_cluster(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", BAD_RPC_LAYER)
def test_rejects_rpc_layer_that_is_not_a_non_empty_string(given, expected):
    with pytest.raises(TFConfigError, match=expected):
        parse(given)


@pytest.mark.parametrize("given, expected", ALL_BAD_INPUTS)
def test_every_error_message_is_a_single_line_with_a_fix(given, expected):
    with pytest.raises(TFConfigError) as err:
        parse(given)
    text = str(err.value)
    assert "\n" not in text and len(text.splitlines()) == 1
    assert "Fix: " in text and text.endswith(".")


def test_error_is_a_value_error():
    assert issubclass(TFConfigError, ValueError)


# --------------------------------------------------------------------------- valid inputs


def test_parses_one_chief_four_workers_two_ps_from_the_environment():
    config = parse_tf_config(env={"TF_CONFIG": tf_config_json(task={"type": "worker", "index": 2})})
    assert config.task == TaskSpec(role="worker", index=2, address="localhost:2225")
    assert dict(config.cluster) == {job: tuple(addresses) for job, addresses in CLUSTER.items()}
    assert (config.num_workers, config.num_ps) == (4, 2)
    assert config.chief_address == "localhost:2222"
    assert config.rpc_layer == "grpc"
    assert config.is_training_role


def test_accepts_an_already_decoded_mapping():
    config = parse_tf_config({"cluster": CLUSTER, "task": {"type": "ps", "index": 1}})
    assert config.task == TaskSpec("ps", 1, "localhost:2228")


def test_ignores_unknown_top_level_and_task_keys():
    given = tf_config_json(task={"type": "chief", "index": 0, "trial": "1"}, environment="cloud")
    config = parse(given)
    assert config.task == TaskSpec("chief", 0, "localhost:2222")


def test_accepts_custom_rpc_layer():
    assert parse(tf_config_json(rpc_layer="grpc+verbs")).rpc_layer == "grpc+verbs"


def test_accepts_evaluator_outside_the_cluster_as_a_non_training_role():
    config = parse(tf_config_json(task={"type": "evaluator", "index": 0}))
    assert config.task == TaskSpec("evaluator", 0, "")
    assert not config.is_training_role
    assert "evaluator" not in config.cluster


def test_accepts_evaluator_listed_in_the_cluster():
    cluster = cluster_with(evaluator=["localhost:2230"])
    config = parse(tf_config_json(cluster=cluster, task={"type": "evaluator", "index": 0}))
    assert config.task == TaskSpec("evaluator", 0, "localhost:2230")
    assert not config.is_training_role


def test_accepts_ipv6_addresses_in_brackets():
    cluster = {"chief": ["[::1]:2222"], "worker": ["[fe80::1%eth0]:2223"], "ps": ["[2001:db8::7]:65535"]}
    config = parse(tf_config_json(cluster=cluster, task={"type": "ps", "index": 0}))
    assert config.task.address == "[2001:db8::7]:65535"


@pytest.mark.parametrize(
    "role, index", [("chief", 0), ("worker", 0), ("worker", 3), ("ps", 1), ("evaluator", 0), ("evaluator", 2)]
)
def test_to_json_round_trips_through_parse_tf_config(role, index):
    config = parse(tf_config_json(task={"type": role, "index": index}, rpc_layer="grpc"))
    text = config.to_json()
    assert parse(text) == config
    assert json.loads(text)["task"] == {"type": role, "index": index}


def test_with_task_keeps_the_cluster_and_validates_the_task():
    config = parse(tf_config_json())
    ps = config.with_task("ps", 1)
    assert ps.task == TaskSpec("ps", 1, "localhost:2228")
    assert ps.cluster == config.cluster
    with pytest.raises(TFConfigError, match=message('TF_CONFIG["task"]["index"] is 2', "Fix: use an index from 0 to 1.")):
        config.with_task("ps", 2)


def test_config_is_frozen_and_its_cluster_read_only():
    config = parse(tf_config_json())
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.task = TaskSpec("ps", 0, "localhost:2227")
    with pytest.raises(TypeError):
        config.cluster["ps"] = ("localhost:9999",)
    assert hash(config) == hash(parse(tf_config_json()))


def test_constructing_tfconfig_directly_validates_it():
    config = TFConfig(CLUSTER, TaskSpec("worker", 1, "localhost:2224"))
    assert config.cluster["worker"][1] == "localhost:2224"
    assert config == parse(tf_config_json(task={"type": "worker", "index": 1}))
    with pytest.raises(TFConfigError, match=message('TaskSpec.address is "localhost:9999"', "Fix:")):
        TFConfig(CLUSTER, TaskSpec("worker", 1, "localhost:9999"))
    with pytest.raises(TFConfigError, match=message('TF_CONFIG["cluster"] has no "ps" job', "Fix:")):
        TFConfig(cluster_with(ps=None), TaskSpec("chief", 0, "localhost:2222"))


def test_make_tf_config_returns_validated_json():
    text = make_tf_config(CLUSTER, "worker", 3)
    assert parse(text).task == TaskSpec("worker", 3, "localhost:2226")
    with pytest.raises(TFConfigError, match=message('TF_CONFIG["task"]["index"] is 4', "Fix:")):
        make_tf_config(CLUSTER, "worker", 4)


def test_validate_cluster_returns_tuples_and_uses_the_given_name_in_errors():
    assert validate_cluster(CLUSTER) == {job: tuple(addresses) for job, addresses in CLUSTER.items()}
    with pytest.raises(TFConfigError, match=message('local cluster has no "ps" job', "Fix:")):
        validate_cluster(cluster_with(ps=None), name="local cluster")
    with pytest.raises(TFConfigError, match=message('cluster["worker"] is "localhost:2223" (a string)', "Fix:")):
        validate_cluster(cluster_with(worker="localhost:2223"), name="cluster")
