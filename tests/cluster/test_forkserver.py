"""A process-mode LocalCluster forks its servers from one fork server (tf_hetero.cluster.forkserver)."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from support import alive, wait_until

pytestmark = pytest.mark.cluster


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tf_hetero import LocalCluster

    c = LocalCluster(2, 1, log_dir=str(tmp_path_factory.mktemp("logs"))).start()
    yield c
    c.stop()


def test_every_server_is_forked_from_the_clusters_fork_server(cluster):
    """Without the fork server each server is a child of this process (``tf-hetero launch``,
    importing TensorFlow itself). Each server's log says it serves: the line comes once
    ``tf.distribute.Server`` returned, after its port listens, which is all ``start()`` waits
    for (a CI run read an empty log: the line came moments later)."""
    forker = cluster._forker.pid  # pylint: disable=protected-access
    pids = cluster.role_pids()
    assert len(pids) == 3 and forker not in pids.values()
    assert {parent_of(pid) for pid in pids.values()} == {forker}

    def says_serving(role, index):
        with open(cluster.log_path(role, index)) as f:
            return f"{role} {index} serving on" in f.read()

    for role, index in pids:
        assert wait_until(lambda: says_serving(role, index), 30), (role, index)


def test_a_killed_server_reports_its_signal_and_a_restarted_one_serves_again(cluster):
    old = cluster.role_pids()[("worker", 1)]
    cluster.kill("worker", 1)
    proc = cluster._proc("worker", 1)  # pylint: disable=protected-access
    assert proc.returncode == -signal.SIGKILL and not alive(old)
    assert ("worker", 1) not in cluster.role_pids()
    cluster.restart("worker", 1)
    new = cluster.role_pids()[("worker", 1)]
    assert new != old and parent_of(new) == cluster._forker.pid  # pylint: disable=protected-access
    cluster.kill("worker", 1, signal.SIGTERM)  # a server stops cleanly on SIGTERM
    assert cluster._proc("worker", 1).returncode == 0  # pylint: disable=protected-access
    cluster.restart("worker", 1)


def test_the_servers_die_with_their_fork_server(tmp_path):
    from tf_hetero import LocalCluster

    c = LocalCluster(1, 1, log_dir=str(tmp_path)).start()
    try:
        servers = list(c.role_pids().values())
        os.kill(c._forker.pid, signal.SIGKILL)  # pylint: disable=protected-access
        assert wait_until(lambda: not any(alive(p) for p in servers), timeout=15)
        assert c.role_pids() == {}  # reported exited, not running
    finally:
        c.stop()


def test_a_fork_server_with_a_second_thread_refuses_with_a_clear_error(tmp_path, monkeypatch):
    """Forking a process with another thread running can deadlock the child: the fork server
    refuses, and the cluster does not start (no silent fallback)."""
    from tf_hetero import LocalCluster
    from tf_hetero.cluster import ClusterStartError, local

    threaded = ("import runpy, threading, time; "
                "threading.Thread(target=time.sleep, args=(600,), daemon=True).start(); "
                "runpy.run_module('tf_hetero.cluster.forkserver', run_name='__main__')")

    original = local.spawn

    def spawn(argv, **kwargs):
        assert argv[1:] == ["-m", "tf_hetero.cluster.forkserver"]
        return original([sys.executable, "-c", threaded], **kwargs)

    monkeypatch.setattr(local, "spawn", spawn)
    c = LocalCluster(1, 1, log_dir=str(tmp_path))
    with pytest.raises(ClusterStartError, match=r"2 threads after import tensorflow.*"
                                               r"forking one is unsafe.*fork=False"):
        c.start()
    assert c.role_pids() == {} and c._forker is None  # pylint: disable=protected-access


def test_fork_false_starts_each_server_as_its_own_launch(tmp_path):
    """``fork=False``: each server is a ``tf-hetero launch`` child of this process that
    imports TensorFlow itself (the way outside Linux), and it serves."""
    from tf_hetero import LocalCluster

    c = LocalCluster(1, 1, fork=False, log_dir=str(tmp_path)).start()
    try:
        assert c._forker is None  # pylint: disable=protected-access
        pids = c.role_pids()
        assert len(pids) == 2 and {parent_of(pid) for pid in pids.values()} == {os.getpid()}
        for role, index in pids:
            # The server answers (start() waited for that) just before it prints the line:
            # read with a bound (a 3-worker suite run once read the log empty).
            def served(path=c.log_path(role, index), line=f"{role} {index} serving on"):
                with open(path) as f:
                    return line in f.read()

            assert wait_until(served, 30), c.log_path(role, index)
    finally:
        c.stop()
    assert c.role_pids() == {}


def test_fork_true_where_forking_is_not_available_is_refused(monkeypatch):
    from tf_hetero import LocalCluster
    from tf_hetero.cluster import forkserver

    monkeypatch.setattr(forkserver, "AVAILABLE", False)
    with pytest.raises(ValueError, match=r"LocalCluster\(fork=True\).*needs Linux.*fork=False"):
        LocalCluster(1, 1, fork=True)
    assert LocalCluster(1, 1).fork is False  # the default follows availability
