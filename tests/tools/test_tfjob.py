"""examples/k8s: the TF_CONFIG every replica of the TFJob example gets (as the Kubeflow training
operator builds it, printed by `tf-hetero tfconfig`) passes the project's own TF_CONFIG checks
and describes the job the manifest declares."""

from __future__ import annotations

import json
import os
import re

import pytest

from tf_hetero.cluster.tf_config import parse_tf_config
from tf_hetero.strategies import registry
from tf_hetero.tools.tfjob import tfjob_tf_configs

from support import REPO, cli

K8S = os.path.join(REPO, "examples", "k8s")


def manifest() -> dict:
    """What the tests need from examples/k8s/tfjob.yaml, read from its layout (no YAML
    library is a dependency): name, namespace, replicas per type, each type's container
    block."""
    with open(os.path.join(K8S, "tfjob.yaml")) as f:
        text = f.read()
    meta = re.search(r"^metadata:\n  name: (\S+)\n  namespace: (\S+)$", text, re.M)
    blocks = re.split(r"^    (Chief|Worker|PS|Evaluator):\n", text, flags=re.M)[1:]
    replicas = {kind: block for kind, block in zip(blocks[::2], blocks[1::2])}
    return {"name": meta.group(1), "namespace": meta.group(2), "blocks": replicas,
            "replicas": {kind: int(re.search(r"^      replicas: (\d+)$", block, re.M).group(1))
                         for kind, block in replicas.items()}}


def test_every_replica_runs_tf_hetero_launch_in_the_tensorflow_container():
    m = manifest()
    assert set(m["replicas"]) == {"Chief", "Worker", "PS"}
    for kind, block in m["blocks"].items():
        assert re.search(r"- name: tensorflow\b", block), kind  # where TF_CONFIG is set
        command = json.loads(re.search(r"command: (\[.*\])", block).group(1))
        assert command == ["tf-hetero", "launch", "--", "python", "train.py"], kind
        assert re.search(r"name: tfjob-port\n\s+containerPort: 2222", block), kind
    chief_args = json.loads(re.search(r"args: (\[.*\])", m["blocks"]["Chief"]).group(1))
    strategy = chief_args[chief_args.index("--strategy") + 1]
    registry.parse(strategy)  # a registered name
    assert registry.entry(registry.parse(strategy)[0]).name != "pss"  # heterogeneity-aware


def test_tfconfig_of_the_example_passes_the_projects_tf_config_checks():
    m = manifest()
    r = m["replicas"]
    proc = cli("tfconfig", "--name", m["name"], "--namespace", m["namespace"],
               "--chief", str(r["Chief"]), "--workers", str(r["Worker"]), "--ps", str(r["PS"]),
               "--json")
    assert proc.returncode == 0, proc.stderr
    configs = json.loads(proc.stdout)
    expected_pods = ([f"{m['name']}-chief-0"] + [f"{m['name']}-worker-{i}" for i in range(r["Worker"])]
                     + [f"{m['name']}-ps-{i}" for i in range(r["PS"])])
    assert list(configs) == expected_pods
    for pod, tf_config in configs.items():
        # What `tf-hetero launch` does first in that pod: read and check TF_CONFIG.
        config = parse_tf_config(env={"TF_CONFIG": json.dumps(tf_config)})
        role, index = pod[len(m["name"]) + 1:].rsplit("-", 1)
        assert (config.task.role, config.task.index) == (role, int(index))
        assert config.task.address == f"{pod}.{m['namespace']}.svc:2222"
        assert (config.num_workers, config.num_ps) == (r["Worker"], r["PS"])
        assert config.chief_address == f"{m['name']}-chief-0.{m['namespace']}.svc:2222"


def test_tfconfig_text_says_the_servers_need_a_private_network():
    proc = cli("tfconfig", "--name", "job", "--workers", "1", "--ps", "1")
    assert proc.returncode == 0, proc.stderr
    assert "no authentication" in proc.stdout and "private network" in proc.stdout


def test_evaluator_gets_a_task_but_no_place_in_the_cluster():
    configs = tfjob_tf_configs("job", workers=1, ps=1, evaluator=1)
    config = parse_tf_config(json.dumps(configs["job-evaluator-0"]))
    assert config.task.role == "evaluator" and "evaluator" not in config.cluster


def test_cluster_domain_and_port_reach_every_address():
    configs = tfjob_tf_configs("job", "ml", workers=2, ps=1, port=3333,
                               cluster_domain="cluster.local")
    assert configs["job-ps-0"]["cluster"]["worker"][1] == "job-worker-1.ml.svc.cluster.local:3333"


@pytest.mark.parametrize("spec, message", [
    (dict(chief=0, workers=2, ps=1), r"^TFJob tfReplicaSpecs\.Chief\.replicas is 0, but "
                                     r"ParameterServerStrategy needs exactly 1 chief replica\. "
                                     r"Fix: set it to 1\.$"),
    (dict(workers=2, ps=0), r"^TFJob tfReplicaSpecs\.PS\.replicas is 0, .* Fix: set it to 1 or "
                            r"more\.$"),
    (dict(workers=-1, ps=1), r"^TFJob tfReplicaSpecs\.Worker\.replicas is -1\. Fix: use an "
                             r"integer >= 0\.$"),
    (dict(workers=1, ps=1, port=70000), r"^TFJob port .* is 70000\. Fix: use a port from 1 to "
                                        r"65535\.$"),
])
def test_a_spec_that_cannot_train_is_refused_naming_the_field_and_the_fix(spec, message):
    with pytest.raises(ValueError, match=message):
        tfjob_tf_configs("job", **spec)


def test_a_name_kubernetes_would_refuse_is_refused_by_the_command():
    proc = cli("tfconfig", "--name", "Train_Job", "--workers", "1", "--ps", "1")
    assert proc.returncode == 2
    assert proc.stderr.startswith("tf-hetero tfconfig: error: TFJob metadata.name is "
                                  "'Train_Job', but the operator builds DNS names from it. Fix:")
