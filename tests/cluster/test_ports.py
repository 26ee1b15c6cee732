"""Ports a local cluster picks are reserved across processes: another process's
``pick_ports`` skips them, even while nothing listens on them (a server killed for a
failover test and not yet restarted), until the holder releases them or exits."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tf_hetero.cluster import ports as ports_mod
from tf_hetero.cluster.ports import pick_ports, release_ports, reserved

pytestmark = pytest.mark.skipif(ports_mod.fcntl is None, reason="no flock on this platform")

_HOLDER = textwrap.dedent("""
    import sys
    from tf_hetero.cluster.ports import pick_ports
    print(pick_ports(1)[0], flush=True)
    sys.stdin.readline()  # hold the reservation until the test closes our stdin
""")


@pytest.fixture
def holder():
    """A second process that picked (and holds) one port; yields that port."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield int(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def _offer(monkeypatch, offers):
    """portpicker offers ``offers`` in turn: the ports free on the machine, as it sees them."""
    import portpicker

    it = iter(offers)
    monkeypatch.setattr(portpicker, "pick_unused_port", lambda: next(it))


def test_a_port_another_process_holds_is_skipped(holder, monkeypatch):
    other = pick_ports(1)  # a port this process holds, to offer after the held one
    release_ports(other)
    _offer(monkeypatch, [holder, other[0]])
    try:
        assert pick_ports(1) == other  # the held port was offered first and skipped
    finally:
        release_ports(other)


def test_a_port_is_free_again_once_its_holder_exits(monkeypatch):
    proc = subprocess.run([sys.executable, "-c", _HOLDER], input="\n", capture_output=True,
                          text=True, timeout=60, check=True)
    port = int(proc.stdout.split()[0])
    _offer(monkeypatch, [port])
    assert pick_ports(1) == [port]
    release_ports([port])


def test_this_process_does_not_hand_out_a_port_it_holds_twice(monkeypatch):
    first = pick_ports(1)
    try:
        later = pick_ports(1)
        release_ports(later)
        _offer(monkeypatch, [first[0], later[0]])
        assert pick_ports(1) == later
        assert first[0] in reserved()
    finally:
        release_ports(first + later)
    assert not (set(first) | set(later)) & reserved()


def test_too_many_taken_ports_is_an_error_naming_the_fix(holder, monkeypatch):
    _offer(monkeypatch, [holder] * ports_mod.MAX_TRIES)
    with pytest.raises(RuntimeError, match="stop the local clusters"):
        pick_ports(1)


def test_a_local_cluster_keeps_its_ports_until_it_is_gone():
    import gc

    from tf_hetero.cluster.local import LocalCluster

    cluster = LocalCluster(num_workers=1, num_ps=1)  # made, not started: no TensorFlow
    ports = {int(a.rsplit(":", 1)[1]) for addrs in cluster.cluster_spec.values()
             for a in addrs}
    assert ports <= reserved()
    del cluster
    gc.collect()
    assert not ports & reserved()
