"""Connecting to a cluster is bounded: a strategy whose servers are not up gives up after its
``connect_timeout_s`` with one error naming each missing task and how to start it (stock
``ParameterServerStrategy`` waits for ever, silently), and it connects as soon as they are up.
No cluster is started: the servers are plain listening sockets."""

from __future__ import annotations

import io
import socket
import threading
import time

import pytest

from tf_hetero.cluster.local import pick_ports
from tf_hetero.cluster.reach import ClusterUnreachableError, wait_for_cluster

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)


def _spec(ports):
    return {"chief": ["127.0.0.1:1"], "worker": [f"127.0.0.1:{p}" for p in ports[:-1]],
            "ps": [f"127.0.0.1:{ports[-1]}"]}


def _listen(port):
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(8)
    return server


def test_a_strategy_gives_up_naming_the_tasks_that_do_not_answer():
    import tensorflow as tf

    import tf_hetero

    ports = pick_ports(3)
    up = _listen(ports[0])  # worker 0 is up; worker 1 and the PS are not
    try:
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(_spec(ports)), rpc_layer="grpc")
        with pytest.raises(ClusterUnreachableError) as e:
            tf_hetero.BSPStrategy(resolver, connect_timeout_s=0.5)
    finally:
        up.close()
    text = str(e.value)
    assert text.startswith("BSPStrategy: 2 of 3 worker/PS tasks did not answer within 0.5 s")
    assert f"worker 1 at 127.0.0.1:{ports[1]}" in text and f"ps 0 at 127.0.0.1:{ports[2]}" in text
    assert "worker 0" not in text and "tf-hetero launch" in text


def test_the_timeout_comes_from_the_environment_and_is_checked(monkeypatch):
    import tensorflow as tf

    import tf_hetero

    monkeypatch.setenv("TF_HETERO_CONNECT_TIMEOUT_S", "soon")
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(_spec(pick_ports(2))), rpc_layer="grpc")
    with pytest.raises(ValueError, match="TF_HETERO_CONNECT_TIMEOUT_S='soon': need seconds > 0"):
        tf_hetero.HPSStrategy(resolver)
    monkeypatch.setenv("TF_HETERO_CONNECT_TIMEOUT_S", "0.3")
    with pytest.raises(ClusterUnreachableError, match="within 0.3 s"):
        tf_hetero.HPSStrategy(resolver)


def test_the_wait_returns_once_late_servers_answer_and_reports_meanwhile():
    ports = pick_ports(2)
    servers = []

    def start_late():
        time.sleep(0.6)
        servers.extend(_listen(p) for p in ports)

    threading.Thread(target=start_late, daemon=True).start()
    out = io.StringIO()
    try:
        wait_for_cluster(_spec(ports), timeout_s=30, report_every_s=0.2, out=out)
    finally:
        for s in servers:
            s.close()
    assert len(servers) == 2  # it returned after they came up, not before
    assert f"waiting for worker 0 at 127.0.0.1:{ports[0]}, ps 0 at 127.0.0.1:{ports[1]}" in (
        out.getvalue())
