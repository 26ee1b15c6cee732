"""The simulator's cost model: how long each closure of a simulated cluster takes.

A training step (one task; one closure on its worker) of ``rows`` samples on worker ``w``,
its ``t``-th step there, lasts::

    task_s        (engine-dispatched closure: tagged queue, task code, accumulators)
      or stock_s  (a closure TF's own queue runs: stock PSS, ASP)
    + base_ms * slowdown(w, t) * rows / batch_size     (the profile's emulated device time)
    + link_us_per_byte[w] * (read bytes + pushed bytes)  (profile ``link=``, in series)
    + PS wait and service: bytes / num_ps * ps_s_per_byte on each PS, a FIFO server
    + local_push_s + codec bytes over the link and PS  (H-PS buffer path, when it pushes)
      + a normal draw of spread local_push_jitter_s      (that push varies on its own)
    + first_task_s                                      (a worker's first step: tracing)
    + a random delay drawn from jitter_quantiles_s      (what a real step varies by)

An async step applies its gradient at its end, as the emulation does (it sleeps out the
device time before the step's own update), which sets its staleness. Every closure
(steps, applies, drains) is first launched by the chief, one at a time,
``dispatch_s`` each (one Python coordinator). A round's apply lasts ``apply_s`` plus the PS
reading every lane it averages (``lanes x param_bytes / num_ps x ps_s_per_byte``), plus
``first_apply_s`` for the first apply and the first drain (tracing). ``fit`` starts its first
step ``setup_s`` after it is called and waits ``epoch_s`` between epochs.

Under the token launch (``launch="tokens"``, record 0017: one long-running closure per worker
takes each task as a token from a queue on a PS), a round strategy's task costs the chief
``token_task_s`` instead of ``dispatch_s``, and each round's apply ``token_round_s`` more
(the chief's release of the tokens and its close on the "done" queues); and the PS holding
worker w's queues (PS ``w % num_ps``, as ``strategies/runtime/carriers.py`` places them)
serves each of its tokens ``token_ps_task_s`` (its dequeue and its done record), one at a
time with that PS's reads and pushes; everything else, ``task_s`` included, is as under
closures (an upper bound: a token's task has no closure to launch).

The constants are fitted from a measured bench JSON (:mod:`tf_hetero.sim.calibrate`) and
stored as JSON; :data:`DEFAULT_PATH` is the one shipped (docs/SIMULATOR.md).

>>> c = CostModel()
>>> round(c.codec_ratio("int8"), 2), c.codec_ratio("fp32")
(0.25, 1.0)
>>> CostModel.from_dict({"task_s": -1})
Traceback (most recent call last):
...
ValueError: cost model task_s=-1: need a finite number >= 0 (seconds, bytes or a factor).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re

import numpy as np

__all__ = ["CostModel", "DeviceTimes", "DEFAULT_PATH", "UNCONTENDED_PATH", "load"]

#: The calibrated cost model shipped with the package (fitted from benchmarks/measured/).
DEFAULT_PATH = os.path.join(os.path.dirname(__file__), "calibration.json")
#: The shipped cost model of a host with a core per task
#: (:func:`tf_hetero.sim.calibrate.uncontended`, written by
#: benchmarks/uncontended_projection.py; docs/SIMULATOR.md).
UNCONTENDED_PATH = os.path.join(os.path.dirname(__file__), "uncontended.json")


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Constants of the cost model (seconds unless named otherwise; see the module)."""

    dispatch_s: float = 0.0012
    stock_s: float = 0.012
    task_s: float = 0.020
    local_push_s: float = 0.020
    #: How much an H-PS buffer-path push varies on its own (a normal draw of this standard
    #: deviation per push, never below -local_push_s): the push is TF work after the step
    #: (read the buffer, encode, send, add on the PS) on the shared CPU, so its time
    #: varies beside the step's. Without it the simulated buffer path was 10-13% too fast
    #: on held-out profiles: its rounds wait at the barrier for the slowest push.
    local_push_jitter_s: float = 0.0
    first_task_s: float = 0.4
    apply_s: float = 0.017
    first_apply_s: float = 0.35
    #: How much a step's time varies around its median: quantiles (0%, 5%, ..., 100%) of
    #: the measured excess minus its median; a step adds a seeded draw from them (what a
    #: round's barrier waits for, and what EPSP's projection may take for a straggler).
    jitter_quantiles_s: tuple = (-0.004, -0.002, -0.001, -0.0005, 0.0, 0.0, 0.0, 0.0005,
                                 0.001, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006,
                                 0.008, 0.010, 0.014, 0.025, 0.1)
    setup_s: float = 1.0
    epoch_s: float = 0.014
    #: Token launch: the chief's CPU per task, its growth per worker in a round of a
    #: tf_keras model's step (~6.3 -> 7.9 ms a round from 4 to 16 workers; a toy step's
    #: 0.07 ms per worker, benchmarks/results/2026-12-06-dispatch-designs/, is the lower
    #: figure), and per round (the release and the close: the toy probe's round beyond its
    #: device time, 4.4-4.6 ms at 4, 8 and 16 workers, which also holds the workers' queue
    #: hops: an upper bound). benchmarks/results/2026-12-07-token-sweep/ (``carrier.py``).
    token_task_s: float = 0.00014
    token_round_s: float = 0.0045
    #: Token launch: the CPU the PS holding the queues spends per token (the carrier's
    #: dequeue and its done record: worker <-> PS calls), the slope over 1, 2, 4 and 16 lanes
    #: of the carriers' PS CPU per round beyond closures' with a sleep-only step (7.7, 11.2,
    #: 12.5, 31 ms; closures' PS ~3 ms a round at any N). Measured on this 2-core machine,
    #: so contended, as ``dispatch_s``. benchmarks/results/2026-12-08-carrier-ps-cost/.
    token_ps_task_s: float = 0.0015
    #: PS service time per byte (FIFO per PS). Not identifiable from a 4-worker run (its PS
    #: never queue): 1 ns/byte, i.e. ~1 GB/s per PS over localhost gRPC, is assumed.
    ps_s_per_byte: float = 1e-9
    #: Bytes of the model's variables (one read per step; one fp32 gradient per push).
    param_bytes: float = 68904.0
    #: Bytes on the wire per payload byte (gRPC framing, requests), measured.
    wire_factor: float = 1.0
    #: Where the constants came from (a bench JSON and the rows used); for people.
    source: str = "defaults"

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "jitter_quantiles_s":
                q = tuple(float(x) for x in v)
                if len(q) < 2 or not all(math.isfinite(x) for x in q) or list(q) != sorted(q):
                    raise ValueError(f"cost model jitter_quantiles_s={v!r}: need two or more "
                                     "finite seconds in increasing order.")
                object.__setattr__(self, f.name, q)
            elif f.name != "source" and not (isinstance(v, (int, float)) and math.isfinite(v)
                                             and v >= 0):
                raise ValueError(f"cost model {f.name}={v!r}: need a finite number >= 0 "
                                 "(seconds, bytes or a factor).")

    @staticmethod
    def codec_ratio(codec: str) -> float:
        """Pushed bytes per fp32 byte of a push codec (its bits / 32)."""
        m = re.fullmatch(r"(fp|int)(\d+)", codec or "fp32")
        if not m:
            raise ValueError(f"codec {codec!r}: expected fp32, fp16, int8 or int4.")
        return int(m.group(2)) / 32.0

    @classmethod
    def from_dict(cls, data) -> "CostModel":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"cost model keys {sorted(unknown)} are unknown. Fix: use only "
                             f"{sorted(known)} (tf-hetero sim --calibrate writes them).")
        return cls(**data)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")


def load(path: str | None = None) -> CostModel:
    """The cost model in ``path`` (default: the calibrated one shipped, :data:`DEFAULT_PATH`)."""
    path = path or DEFAULT_PATH
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"calibration file {path!r} does not exist. Fix: make one with "
                         "tf-hetero sim --calibrate BENCH.json --costs FILE.") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"calibration file {path!r} is not valid JSON ({e}). Fix: make it "
                         "again with tf-hetero sim --calibrate BENCH.json.") from None
    if not isinstance(data, dict):
        raise ValueError(f"calibration file {path!r} must hold a JSON object of constants.")
    return CostModel.from_dict(data)


class DeviceTimes:
    """A profile's emulated device time per step, from the profile's own tables
    (:meth:`~tf_hetero.emulation.profile.Profile.constant_slowdowns`, ``change_vectors``,
    ``straggle_table``: the same seeded draws the emulation uses), read once so a step costs
    a lookup. ``slowdown`` equals ``Profile.slowdown`` (tests/sim/test_sim.py checks it), so
    :func:`tf_hetero.telemetry.perf.ideal_over_tasks` takes this object as its profile.

    >>> from tf_hetero.emulation.profile import Profile
    >>> d = DeviceTimes(Profile.parse("slow=1:4;change=0@2:2"), 2)
    >>> [d.slowdown(0, t, 2) for t in range(3)], d.slowdown(1, 0, 2)
    ([1.0, 1.0, 2.0], 4.0)
    """

    def __init__(self, profile, num_workers: int):
        self.profile = profile
        self.base_ms = profile.base_ms
        self.horizon = profile.horizon
        self.num_workers = num_workers
        self._const = np.asarray(profile.constant_slowdowns(num_workers), np.float64).tolist()
        at, factor = profile.change_vectors(num_workers)
        self._at, self._factor = at.tolist(), factor.tolist()
        self._straggle = profile.straggle_table(num_workers)
        self._steady = not profile.straggle_p or profile.straggle_k == 1.0
        self._expected = profile.expected_slowdowns(num_workers)
        self.link_us_per_byte = profile.link_us_per_byte(num_workers)

    def slowdown(self, worker: int, task: int, num_workers: int | None = None) -> float:
        base = self._factor[worker] if task >= self._at[worker] else self._const[worker]
        if self._steady:
            return float(base)
        return float(base * self._straggle[worker, task % self.horizon])

    def expected_slowdowns(self, num_workers: int, task: int = 0) -> tuple:
        return self.profile.expected_slowdowns(num_workers, task)

    def device_s(self, worker: int, task: int, rows: float, batch_size: int) -> float:
        """Emulated seconds of ``worker``'s ``task``-th step over ``rows`` samples."""
        return self.base_ms * 1e-3 * self.slowdown(worker, task) * rows / batch_size
