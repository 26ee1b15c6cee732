"""``tf-hetero tfconfig``: the ``TF_CONFIG`` each replica of a Kubeflow TFJob receives.

The Kubeflow training operator gives replica ``index`` of type ``Type`` in TFJob ``NAME``
(namespace ``NS``) a headless Service ``NAME-type-index`` and sets, in its container named
``tensorflow``::

    TF_CONFIG={"cluster": {"chief": ["NAME-chief-0.NS.svc:2222"],
                           "worker": ["NAME-worker-0.NS.svc:2222", ...],
                           "ps": ["NAME-ps-0.NS.svc:2222", ...]},
               "task": {"type": "worker", "index": 0}, "environment": "cloud"}

(replica types lower-cased; evaluator replicas get a task but are left out of ``cluster``;
the port is the container port named ``tfjob-port``, 2222 by default; the operator's
``CUSTOM_CLUSTER_DOMAIN`` is appended after ``svc``). This module computes the same and checks
every one with the project's TF_CONFIG validation (:mod:`tf_hetero.cluster.tf_config`), so a
job spec that would give a bad cluster is refused before anything is deployed. Pure Python.

>>> configs = tfjob_tf_configs("train", "ml", workers=2, ps=1)
>>> list(configs)
['train-chief-0', 'train-worker-0', 'train-worker-1', 'train-ps-0']
>>> configs["train-worker-1"]["cluster"]["ps"], configs["train-worker-1"]["task"]
(['train-ps-0.ml.svc:2222'], {'type': 'worker', 'index': 1})
"""

from __future__ import annotations

import json
import re

from tf_hetero.cluster.tf_config import parse_tf_config

__all__ = ["DEFAULT_PORT", "tfjob_tf_configs", "format_tf_configs", "NO_AUTH_NOTE"]

#: The operator's default port (container port ``tfjob-port``).
DEFAULT_PORT = 2222

#: Said wherever a cluster's addresses are printed.
NO_AUTH_NOTE = ("TensorFlow's gRPC servers have no authentication and no encryption: anyone "
                "who can reach a task's port can run TensorFlow ops in it. Run the job on a "
                "private network only (examples/k8s/networkpolicy.yaml).")

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def tfjob_tf_configs(name: str, namespace: str = "default", *, chief: int = 1, workers: int,
                     ps: int, evaluator: int = 0, port: int = DEFAULT_PORT,
                     cluster_domain: str = "") -> dict[str, dict]:
    """``{pod name: TF_CONFIG object}`` for every replica of the TFJob, chief first.

    Raises ValueError naming the bad field and the fix (the replica counts a
    ParameterServerStrategy job needs, a TFJob name Kubernetes accepts), or
    :class:`~tf_hetero.cluster.tf_config.TFConfigError` if a TF_CONFIG fails the checks.
    """
    for field, value in (("metadata.name", name), ("metadata.namespace", namespace)):
        if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.fullmatch(value):
            raise ValueError(f"TFJob {field} is {value!r}, but the operator builds DNS names from "
                             "it. Fix: use at most 63 lowercase letters, digits and '-', "
                             "starting and ending with a letter or digit.")
    counts = {"chief": chief, "worker": workers, "ps": ps, "evaluator": evaluator}
    spec_key = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
    for role, n in counts.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"TFJob tfReplicaSpecs.{spec_key[role]}.replicas is {n!r}. Fix: use "
                             "an integer >= 0.")
    for role, need in (("chief", "exactly 1"), ("worker", "at least 1"), ("ps", "at least 1")):
        if counts[role] < 1 or (role == "chief" and counts[role] != 1):
            raise ValueError(
                f"TFJob tfReplicaSpecs.{spec_key[role]}.replicas is {counts[role]}, but "
                f"ParameterServerStrategy needs {need} {role} replica. Fix: set it to "
                f"{'1' if role == 'chief' else '1 or more'}.")
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"TFJob port (container port 'tfjob-port') is {port!r}. Fix: use a port "
                         "from 1 to 65535.")
    suffix = f".{namespace}.svc" + (f".{cluster_domain.strip('.')}" if cluster_domain else "")
    cluster = {role: [f"{name}-{role}-{i}{suffix}:{port}" for i in range(counts[role])]
               for role in ("chief", "worker", "ps")}  # evaluators are not in the cluster
    configs = {}
    for role in ("chief", "worker", "ps", "evaluator"):
        for i in range(counts[role]):
            config = {"cluster": cluster, "task": {"type": role, "index": i},
                      "environment": "cloud"}
            parse_tf_config(json.dumps(config))  # the checks `tf-hetero launch` runs in the pod
            configs[f"{name}-{role}-{i}"] = json.loads(json.dumps(config))
    return configs


def format_tf_configs(configs: dict[str, dict], name: str, namespace: str) -> str:
    """One line per replica: the pod name and its TF_CONFIG, then what each role does."""
    width = max(map(len, configs))
    lines = [f"# TF_CONFIG of each replica of TFJob {name!r} in namespace {namespace!r}, as the "
             "Kubeflow training operator sets it (checked with tf-hetero's TF_CONFIG validation)"]
    lines += [f"{pod.ljust(width)}  {json.dumps(config)}" for pod, config in configs.items()]
    lines += ["# `tf-hetero launch -- python train.py` in every pod: the chief runs train.py, "
              "workers and PS serve until the job ends, an evaluator exits (unused).",
              f"# {NO_AUTH_NOTE}"]
    return "\n".join(lines)
