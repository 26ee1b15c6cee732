"""Measured worker<->PS traffic: bytes on the TCP connections between worker and PS processes.

What a strategy really sends and reads is counted where it leaves the process, the same way for
every row of a benchmark (stock PSS included), instead of a formula per strategy: the kernel's
per-socket counters (``tcp_info``: ``bytes_acked`` out, ``bytes_received`` in), read with
``ss -tinpH`` (iproute2). A connection counts for worker ``w`` and PS ``p`` when one end is
owned by ``w``'s process and the other by ``p``'s, whichever side opened it (TF's rendezvous
makes the *receiver* pull tensors, so a gradient a worker sends to a PS flows on a connection
the PS may have opened). Bytes are gRPC payloads (framing and protobuf included, TCP/IP
headers excluded). The chief's traffic with the PS tasks is counted apart
(``chief_ps_bytes_per_sample``): it holds the bench's accuracy sampler (every row reads the
model every ``eval_interval_s``, so slower rows pay more per sample) and the rounds' applies,
which run on the chief but keep every gradient-sized tensor on the PS (a few scalars and the
control messages cross).

Needs a process-mode :class:`~tf_hetero.cluster.LocalCluster` (one process per task) and
``ss``; :meth:`TrafficMeter.for_cluster` returns ``None`` (and says why) otherwise.
Connections closed between two snapshots lose their counts (gRPC keeps channels open).

>>> sample = '''ESTAB 0 0 127.0.0.1:5000 127.0.0.1:7000 users:(("python",pid=11,fd=3))
... \\t cubic bytes_sent:900 bytes_acked:901 bytes_received:40 segs_out:3
... ESTAB 0 0 127.0.0.1:7000 127.0.0.1:5000 users:(("python",pid=22,fd=9))
... \\t cubic bytes_sent:40 bytes_acked:41 bytes_received:900 segs_out:3'''
>>> socks = parse_ss(sample)
>>> socks[("127.0.0.1:5000", "127.0.0.1:7000")]
(11, 900, 40)
>>> pair_bytes(socks, {11: ("worker", 0), 22: ("ps", 1)})
{(0, 1): (900, 40)}
>>> pair_bytes(socks, {11: ("chief", 0), 22: ("ps", 1)}, "chief"), pair_bytes(socks, {11: ("chief", 0), 22: ("ps", 1)})
({(0, 1): (900, 40)}, {})
>>> Traffic.between({(0, 1): (100, 10)}, {(0, 1): (900, 40), (1, 0): (5, 6)}, num_ps=2).to_ps
[5, 800]
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess

__all__ = ["Traffic", "TrafficMeter", "parse_ss", "pair_bytes", "process_roles"]


def process_roles(cluster) -> dict:
    """``{pid: (role, index)}`` of a process-mode local cluster's servers and of this
    process, its chief (``("chief", 0)``): the processes a bench meter reads."""
    roles = {pid: key for key, pid in cluster.role_pids().items()}
    roles[os.getpid()] = ("chief", 0)  # the meters live in the chief (the bench)
    return roles


# With a state filter ss leaves the state column out.
_HEAD = re.compile(r"^(?:[A-Z][A-Z0-9-]*\s+)?\d+\s+\d+\s+(\S+)\s+(\S+)\s+.*pid=(\d+)")
_SENT = re.compile(r"bytes_acked:(\d+)")
_RECV = re.compile(r"bytes_received:(\d+)")


def parse_ss(text: str) -> dict:
    """``{(local, peer): (pid, bytes out, bytes in)}`` from ``ss -tinpH`` output (one header
    line per socket, then its ``tcp_info`` line). ``bytes_acked`` counts what the peer
    received (one more than the payload when the connection's SYN/FIN is acked; the first
    byte of a connection is taken off so a fresh one reads 0)."""
    out, head = {}, None
    for line in text.splitlines():
        m = _HEAD.match(line)
        if m:
            head = (m.group(1), m.group(2), int(m.group(3)))
            continue
        if head is None or not line[:1].isspace():
            continue
        sent, recv = _SENT.search(line), _RECV.search(line)
        out[head[:2]] = (head[2], max(int(sent.group(1)) - 1, 0) if sent else 0,
                         int(recv.group(1)) if recv else 0)
        head = None
    return out


def pair_bytes(sockets: dict, roles: dict, role: str = "worker") -> dict:
    """``{(i, ps): (bytes i -> PS, bytes PS -> i)}`` summed over the connections whose two
    ends belong to task ``i`` of ``role`` and a PS (``roles``: pid -> (role, i))."""
    out: dict = {}
    for (local, peer), (pid, sent, recv) in sockets.items():
        other = sockets.get((peer, local))
        if other is None or roles.get(pid, ("",))[0] != role:
            continue
        peer_role, ps = roles.get(other[0], ("", -1))
        if peer_role != "ps":
            continue
        w = roles[pid][1]
        s, r = out.get((w, ps), (0, 0))
        out[(w, ps)] = (s + sent, r + recv)
    return out


@dataclasses.dataclass
class Traffic:
    """Bytes between all workers and each PS over an interval: ``to_ps[p]`` (pushes, write
    and read requests) and ``from_ps[p]`` (variable reads, results)."""

    to_ps: list
    from_ps: list
    chief: int = 0  # bytes between the chief and the PS tasks, both ways

    @classmethod
    def between(cls, before: dict, after: dict, num_ps: int) -> "Traffic":
        """From two snapshots (``{"worker": pairs, "chief": pairs}``, or worker pairs)."""
        before, after = ({"worker": x} if "worker" not in x else x for x in (before, after))
        delta = {}
        for role in ("worker", "chief"):
            delta[role] = {}
            for key, (s, r) in after.get(role, {}).items():
                s0, r0 = before.get(role, {}).get(key, (0, 0))
                # A connection opened in the interval starts at 0; counters never go back.
                delta[role][key] = (max(s - s0, 0), max(r - r0, 0))
        to_ps, from_ps = [0] * num_ps, [0] * num_ps
        for (_, p), (s, r) in delta["worker"].items():
            to_ps[p] += s
            from_ps[p] += r
        return cls(to_ps, from_ps, sum(s + r for s, r in delta["chief"].values()))

    @property
    def total(self) -> int:
        return sum(self.to_ps) + sum(self.from_ps)

    def per_sample(self, samples: int) -> dict:
        """The figures a benchmark row reports, per sample computed."""
        n = max(samples, 1)
        load = [a + b for a, b in zip(self.to_ps, self.from_ps)]
        mean = sum(load) / len(load) if load else 0.0
        return {"bytes_to_ps_per_sample": sum(self.to_ps) / n,
                "bytes_from_ps_per_sample": sum(self.from_ps) / n,
                "chief_ps_bytes_per_sample": self.chief / n,
                "ps_bytes": [{"to": a, "from": b} for a, b in zip(self.to_ps, self.from_ps)],
                "ps_load_max_over_mean": max(load) / mean if mean else None}


class TrafficMeter:
    """Snapshots of worker<->PS bytes of one process-mode local cluster."""

    def __init__(self, roles: dict, num_ps: int):
        self.roles, self.num_ps = roles, num_ps

    @classmethod
    def for_cluster(cls, cluster) -> "TrafficMeter | None":
        """A meter for ``cluster``, or ``None`` (printed reason) when it cannot measure."""
        why = None
        if not getattr(cluster, "processes", False):
            why = "an in-process cluster (one process for every task)"
        elif shutil.which("ss") is None:
            why = "no `ss` command (Debian/Ubuntu: apt-get install iproute2)"
        if why:
            print(f"[tf-hetero] traffic not measured: {why}.", flush=True)
            return None
        return cls(process_roles(cluster), cluster.num_ps)

    def snapshot(self) -> dict:
        text = subprocess.run(["ss", "-tinpH", "state", "established"], capture_output=True,
                              text=True, timeout=30, check=True).stdout
        sockets = parse_ss(text)
        return {role: pair_bytes(sockets, self.roles, role) for role in ("worker", "chief")}

    def since(self, before: dict) -> Traffic:
        return Traffic.between(before, self.snapshot(), self.num_ps)
