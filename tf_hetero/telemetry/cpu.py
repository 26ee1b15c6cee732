"""CPU time of a process-mode local cluster over a fit, per role (chief, workers, PS tasks),
and how busy the whole machine was: what a task costs beside its device time when the
workers, PS tasks and chief share a few cores (docs/MEASUREMENT.md, "CPU per sample").

Read from Linux's ``/proc``: ``/proc/PID/stat`` (user + system time of every thread of a
process, in clock ticks) and ``/proc/stat`` (the machine's busy and idle ticks over all
cores). The chief's figure includes everything the chief process does beside the fit, such
as the bench's accuracy sampler reading the weights (evaluated after the fit, outside the
figure), which grows with the fit's length.

>>> line = "42 (python) S 1 42 42 0 -1 4194560 9 0 0 0 250 50 0 0 20 0 9 0 1 2 3"
>>> process_ticks(line)
300
>>> machine_ticks("cpu  100 0 50 800 50 0 0 0 0 0")
(150, 850)
>>> busy_fraction((150, 850), (450, 1150))
0.5
"""

from __future__ import annotations

import os

from tf_hetero.telemetry.traffic import process_roles

__all__ = ["CpuMeter", "process_ticks", "machine_ticks", "busy_fraction"]

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_ticks(stat_line: str) -> int:
    """User + system clock ticks of one ``/proc/PID/stat`` line (fields 14 and 15; the
    command name in parentheses may hold spaces, so fields count from its closing one)."""
    fields = stat_line.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def machine_ticks(cpu_line: str) -> tuple[int, int]:
    """``(busy, idle)`` ticks of the first line of ``/proc/stat`` (all cores); idle counts
    iowait too."""
    values = [int(v) for v in cpu_line.split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, idle


def busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The share of the machine's core time spent busy between two :func:`machine_ticks`."""
    busy, idle = after[0] - before[0], after[1] - before[1]
    return busy / (busy + idle) if busy + idle > 0 else None


class CpuMeter:
    """Snapshots of the CPU ticks of a local cluster's processes and of the chief (this
    process), by role.

    Args:
      roles: ``{pid: role}``, role one of ``"chief"``, ``"worker"``, ``"ps"``.
    """

    ROLES = ("chief", "worker", "ps")

    def __init__(self, roles: dict):
        self.roles = roles

    @classmethod
    def for_cluster(cls, cluster) -> "CpuMeter | None":
        """A meter for a process-mode ``cluster`` (``None``, with the reason printed, where
        it cannot measure: an in-process cluster, or no ``/proc``)."""
        why = None
        if not getattr(cluster, "processes", False):
            why = "an in-process cluster (one process for every task)"
        elif not os.path.exists("/proc/stat"):
            why = "no /proc (Linux only)"
        if why:
            print(f"[tf-hetero] CPU time not measured: {why}.", flush=True)
            return None
        return cls({pid: role for pid, (role, _) in process_roles(cluster).items()})

    def snapshot(self) -> dict:
        """``{"ticks": {pid: ticks}, "machine": (busy, idle)}`` now (a process that ended
        is left out)."""
        ticks = {}
        for pid in self.roles:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ticks[pid] = process_ticks(f.read())
            except OSError:
                continue
        with open("/proc/stat") as f:
            machine = machine_ticks(f.readline())
        return {"ticks": ticks, "machine": machine}

    def since(self, before: dict) -> dict:
        """CPU seconds per role since ``before`` (:meth:`snapshot`) and the machine's busy
        share: ``{"cpu_s": {"chief": .., "worker": .., "ps": ..}, "machine_busy": ..}``."""
        after = self.snapshot()
        cpu = dict.fromkeys(self.ROLES, 0.0)
        for pid, ticks in after["ticks"].items():
            if pid in before["ticks"]:
                cpu[self.roles[pid]] += (ticks - before["ticks"][pid]) / _TICKS_PER_S
        return {"cpu_s": cpu, "machine_busy": busy_fraction(before["machine"], after["machine"])}
