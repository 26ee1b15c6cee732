"""Starting clusters: TF_CONFIG parsing and validation (:mod:`~tf_hetero.cluster.tf_config`),
single-binary role dispatch (:mod:`~tf_hetero.cluster.roles`: ``serve``, ``run``,
``cluster_resolver``), local multi-process clusters (:mod:`~tf_hetero.cluster.local`), and the
bounded wait for a cluster's servers (:mod:`~tf_hetero.cluster.reach`)."""

from tf_hetero.cluster.local import ClusterStartError, LocalCluster
from tf_hetero.cluster.reach import ClusterUnreachableError, wait_for_cluster
from tf_hetero.cluster.roles import cluster_resolver, run, serve
from tf_hetero.cluster.tf_config import TFConfig, TFConfigError, parse_tf_config

__all__ = ["LocalCluster", "ClusterStartError", "serve", "run", "cluster_resolver",
           "parse_tf_config", "TFConfig", "TFConfigError", "wait_for_cluster",
           "ClusterUnreachableError"]
