"""Heterogeneity profiles: how much slower each emulated worker is, task by task.

A profile describes *emulated device time*: the time one training task (one micro-batch
forward/backward pass) takes on worker ``w`` when it is its ``t``-th task::

    device_ms(w, t) = base_ms * constant(w) * change(w, t) * straggle(w, t)

- ``constant(w)``: a fixed slowdown per worker, given directly (``slowdowns=``/``slow=``) or
  through hardware classes (``classes=``).
- ``change(w, t)``: a step change, e.g. worker 3 runs 4x slower from its 200th task on
  (``change=3@200:4``); it replaces the constant factor from that task on.
- ``straggle(w, t)``: transient stragglers: with probability ``p`` a task is ``k`` times
  slower (``straggle=0.1x5``). The draws are a seeded table of ``horizon`` tasks per worker,
  repeated after that, so a run is reproducible from ``seed``.

This module is pure Python and NumPy; :mod:`tf_hetero.emulation` turns a profile into the
sleep that runs inside each worker's step.

Inline spec grammar (items separated by ``;``)::

    base_ms=100            emulated device time of one task on a 1x worker (default 100)
    slowdowns=1,1,1,4      constant factor per worker, in worker-index order
    slow=3:4,2:2           worker 3 is 4x slower, worker 2 is 2x slower (others 1x)
    classes=v100:3@1,k80:1@4   hardware classes in worker-index order: NAME:COUNT@FACTOR
    straggle=0.1x5         each task is 5x slower with probability 0.1
    change=3@200:4         worker 3 runs at 4x from its task 200 on (repeatable, comma list)
    seed=0                 seed of the straggler draws
    horizon=4096           straggler draws per worker before they repeat
    link=8                 emulated worker<->PS link, MB/s (one value: every worker; or
                           one per worker, link=8,8,8,2): every strategy's steps wait
                           bytes / rate for their variable reads and gradient pushes
                           (H-PS: for each push of its buffer, where it happens)
    ps_mbps=4              emulated parameter servers (tf_hetero.emulation.ps): each PS
                           serves the bytes a step reads from it and pushes to it at this
                           rate, MB/s (one value: every PS; or one per PS, ps_mbps=4,4),
                           one request at a time (a shared server: concurrent steps queue)
    ps_slow=1:3            PS 1 serves 3x slower (needs ps_mbps)
    ps_interfere=0:4@1/5   transient interference: PS 0 serves 4x slower during 1 s of
                           every 5 s (wall clock; comma list; needs ps_mbps)

A JSON file holds the same keys: ``{"base_ms": 100, "slowdowns": [1, 1, 1, 4],
"straggle": {"p": 0.1, "k": 5}, "classes": [{"name": "k80", "count": 1, "slowdown": 4}],
"slow": {"3": 4}, "change": [{"worker": 3, "at_task": 200, "slowdown": 4}], "seed": 0,
"link": [8], "ps_mbps": [4], "ps_slow": {"1": 3},
"ps_interfere": [{"ps": 0, "factor": 4, "on_s": 1, "period_s": 5}]}``.

Example:

>>> p = Profile.parse("slow=3:4;straggle=0.1x5;seed=1")
>>> p.constant_slowdowns(4)
(1.0, 1.0, 1.0, 4.0)
>>> round(p.expected_slowdowns(4)[0], 3)   # 1 + p*(k-1)
1.4
>>> Profile.parse("classes=v100:3@1,k80:1@4").class_names(4)
('v100', 'v100', 'v100', 'k80')
>>> Profile.parse("ps_mbps=4;ps_slow=1:3").ps_us_per_byte(2)   # PS 1 serves 3x slower
(0.25, 0.75)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Mapping

import numpy as np

from tf_hetero import env as _env
from tf_hetero.emulation import profile_fields as pf
from tf_hetero.emulation.profile_fields import Change, HardwareClass, Interference, ProfileError

__all__ = ["Profile", "ProfileError", "HardwareClass", "Change", "Interference", "PROFILE_ENV"]

#: Environment variable through which ``tf-hetero run --profile`` hands the profile to the
#: training program (the chief), which applies it with :func:`tf_hetero.emulate`.
PROFILE_ENV = _env.PROFILE


@dataclasses.dataclass(frozen=True)
class Profile:
    """A validated heterogeneity profile. Build one with :meth:`parse` or the constructor."""

    base_ms: float = 100.0
    slowdowns: tuple[float, ...] = ()
    slow: tuple[tuple[int, float], ...] = ()
    classes: tuple[HardwareClass, ...] = ()
    straggle_p: float = 0.0
    straggle_k: float = 1.0
    changes: tuple[Change, ...] = ()
    seed: int = 0
    horizon: int = 4096
    link_mbps: tuple[float, ...] = ()  # emulated push bandwidth, MB/s (one, or per worker)
    ps_mbps: tuple[float, ...] = ()  # emulated PS service rate, MB/s (one, or per PS)
    ps_slow: tuple[tuple[int, float], ...] = ()  # (PS, factor): that PS serves factor x slower
    ps_interfere: tuple[Interference, ...] = ()

    def __post_init__(self):
        pf.positive("base_ms", self.base_ms)
        for r in self.link_mbps:
            pf.positive("link", r)
        for r in self.ps_mbps:
            pf.positive("ps_mbps", r)
        for p, f in self.ps_slow:
            pf.index("ps_slow PS", p)
            pf.positive("ps_slow factor", f)
        for i in self.ps_interfere:
            pf.index("ps_interfere PS", i.ps)
            pf.positive("ps_interfere factor", i.factor)
            pf.positive("ps_interfere on_s", i.on_s)
            pf.positive("ps_interfere period_s", i.period_s)
            if i.on_s > i.period_s:
                raise ProfileError(
                    f"ps_interfere on PS {i.ps}: {pf.num(i.on_s)} s on in every {pf.num(i.period_s)} s "
                    "is more than the period. Fix: on_s <= period_s, e.g. ps_interfere=0:4@1/5.")
        if (self.ps_slow or self.ps_interfere) and not self.ps_mbps:
            raise ProfileError(
                "ps_slow and ps_interfere scale a PS's service rate, but the profile sets none. "
                "Fix: add ps_mbps=RATE (MB/s each PS serves), e.g. 'ps_mbps=4;ps_slow=1:3'.")
        for s in self.slowdowns:
            pf.positive("slowdowns", s)
        for w, s in self.slow:
            pf.index("slow worker", w)
            pf.positive("slow factor", s)
        for c in self.classes:
            if not pf.CLASS_NAME.match(c.name):
                raise ProfileError(
                    f"Hardware class name {c.name!r} may use only letters, digits, '_', '-' and "
                    "'.'. Fix: rename it, e.g. 'k80'.")
            pf.positive(f"classes[{c.name}] factor", c.slowdown)
            if c.count < 1:
                raise ProfileError(
                    f"Hardware class {c.name!r} has count {c.count}; a class needs at least 1 worker.")
        if sum(bool(x) for x in (self.slowdowns, self.slow, self.classes)) > 1:
            raise ProfileError(
                "A profile gives constant slowdowns in one way only; received more than one of "
                "'slowdowns', 'slow' and 'classes'. Fix: keep one of them.")
        if not 0.0 <= self.straggle_p <= 1.0:
            raise ProfileError(
                f"Straggler probability p must be in [0, 1]; received {self.straggle_p!r}. "
                "Fix: e.g. straggle=0.1x5.")
        if not math.isfinite(self.straggle_k) or self.straggle_k < 1.0:
            raise ProfileError(
                f"Straggler factor k must be >= 1 (a straggler is slower); received {self.straggle_k!r}.")
        changed: set[int] = set()
        for c in self.changes:
            pf.index("change worker", c.worker)
            pf.index("change at_task", c.at_task)
            pf.positive("change slowdown", c.slowdown)
            if c.worker in changed:
                raise ProfileError(f"Profile has two changes for worker {c.worker}; only one per "
                                   "worker is supported. Fix: keep one.")
            changed.add(c.worker)
        pf.index("seed", self.seed)
        if self.horizon < 1:
            raise ProfileError(f"Profile horizon must be >= 1; received {self.horizon!r}.")

    # ------------------------------------------------------------------ parsing
    @classmethod
    def parse(cls, spec: "str | Mapping | Profile | None") -> "Profile":
        """Builds a profile from an inline spec, a path to a JSON file, a dict, or ``None``.

        ``None``, ``""`` and ``"uniform"`` give the uniform profile (every worker 1x).
        """
        if spec is None or isinstance(spec, Profile):
            return spec or cls()
        if isinstance(spec, Mapping):
            return cls._from_mapping(spec, source="profile dict")
        text = str(spec).strip()
        if text in ("", "uniform"):
            return cls()
        if text.endswith(".json") or os.path.isfile(text):
            try:
                with open(text) as f:
                    data = json.load(f)
            except FileNotFoundError:
                raise ProfileError(f"Profile file {text!r} does not exist. Fix: give an existing "
                                   "JSON file or an inline spec such as 'slow=3:4'.") from None
            except json.JSONDecodeError as e:
                raise ProfileError(f"Profile file {text!r} is not valid JSON ({e}).") from None
            if not isinstance(data, Mapping):
                raise ProfileError(f"Profile file {text!r} must hold a JSON object; "
                                   f"received {type(data).__name__}.")
            return cls._from_mapping(data, source=text)
        return cls._from_inline(text)

    @classmethod
    def _from_inline(cls, text: str) -> "Profile":
        fields: dict[str, Any] = {}
        for item in filter(None, (s.strip() for s in text.split(";"))):
            key, sep, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not value:
                raise ProfileError(
                    f"Profile item {item!r} is not KEY=VALUE. Fix: e.g. 'slow=3:4;straggle=0.1x5'.")
            try:
                if key == "base_ms":
                    fields["base_ms"] = pf.positive("base_ms", value)
                elif key == "slowdowns":
                    fields["slowdowns"] = tuple(pf.positive("slowdowns", v) for v in value.split(","))
                elif key == "slow":
                    fields["slow"] = pf.factors(value, "slow worker", "slow factor")
                elif key == "classes":
                    classes = []
                    for part in value.split(","):
                        name, rest = part.split(":")
                        count, factor = rest.split("@")
                        classes.append(HardwareClass(name.strip(), pf.index("class count", count),
                                                     pf.positive("class factor", factor)))
                    fields["classes"] = tuple(classes)
                elif key == "straggle":
                    p, k = value.lower().split("x")
                    fields["straggle_p"] = pf.positive("straggle p", p, allow_zero=True)
                    fields["straggle_k"] = pf.positive("straggle k", k)
                elif key == "change":
                    changes = []
                    for part in value.split(","):
                        w, rest = part.split("@")
                        at, factor = rest.split(":")
                        changes.append(Change(pf.index("change worker", w), pf.index("change at_task", at),
                                              pf.positive("change slowdown", factor)))
                    fields["changes"] = tuple(changes)
                elif key in ("seed", "horizon"):
                    fields[key] = pf.index(key, value)
                elif key == "link":
                    fields["link_mbps"] = tuple(pf.positive("link", v) for v in value.split(","))
                elif key == "ps_mbps":
                    fields["ps_mbps"] = tuple(pf.positive("ps_mbps", v) for v in value.split(","))
                elif key == "ps_slow":
                    fields["ps_slow"] = pf.factors(value, "ps_slow PS", "ps_slow factor")
                elif key == "ps_interfere":
                    fields["ps_interfere"] = tuple(pf.interference(part) for part in value.split(","))
                else:
                    raise ProfileError(
                        f"Unknown profile key {key!r} in {item!r}. Known keys: base_ms, slowdowns, "
                        "slow, classes, straggle, change, seed, horizon, link, ps_mbps, ps_slow, "
                        "ps_interfere.")
            except ValueError as e:  # a split that did not give the expected parts
                if isinstance(e, ProfileError):
                    raise
                raise ProfileError(
                    f"Profile item {item!r} is malformed. Fix: see the grammar, e.g. "
                    "'slow=3:4', 'classes=v100:3@1,k80:1@4', 'straggle=0.1x5', 'change=3@200:4', "
                    "'ps_slow=1:3', 'ps_interfere=0:4@1/5'."
                ) from None
        return cls(**fields)

    @classmethod
    def _from_mapping(cls, data: Mapping, source: str) -> "Profile":
        known = {"base_ms", "slowdowns", "slow", "classes", "straggle", "change", "seed", "horizon",
                 "link", "ps_mbps", "ps_slow", "ps_interfere"}
        unknown = set(data) - known
        if unknown:
            raise ProfileError(f"Unknown profile key(s) {sorted(unknown)} in {source}. "
                               f"Known keys: {sorted(known)}.")
        fields: dict[str, Any] = {}
        try:
            if "base_ms" in data:
                fields["base_ms"] = pf.positive("base_ms", data["base_ms"])
            if "slowdowns" in data:
                fields["slowdowns"] = tuple(pf.positive("slowdowns", v) for v in data["slowdowns"])
            if "slow" in data:
                fields["slow"] = tuple((pf.index("slow worker", w), pf.positive("slow factor", s))
                                       for w, s in dict(data["slow"]).items())
            if "classes" in data:
                fields["classes"] = tuple(
                    HardwareClass(str(c["name"]), pf.index("class count", c["count"]),
                                  pf.positive("class factor", c["slowdown"])) for c in data["classes"])
            if "straggle" in data:
                fields["straggle_p"] = pf.positive("straggle p", data["straggle"]["p"], allow_zero=True)
                fields["straggle_k"] = pf.positive("straggle k", data["straggle"]["k"])
            if "change" in data:
                fields["changes"] = tuple(
                    Change(pf.index("change worker", c["worker"]), pf.index("change at_task", c["at_task"]),
                           pf.positive("change slowdown", c["slowdown"])) for c in data["change"])
            for key in ("seed", "horizon"):
                if key in data:
                    fields[key] = pf.index(key, data[key])
            if "link" in data:
                link = data["link"]
                fields["link_mbps"] = tuple(pf.positive("link", v) for v in (
                    link if isinstance(link, (list, tuple)) else [link]))
            if "ps_mbps" in data:
                rate = data["ps_mbps"]
                fields["ps_mbps"] = tuple(pf.positive("ps_mbps", v) for v in (
                    rate if isinstance(rate, (list, tuple)) else [rate]))
            if "ps_slow" in data:
                fields["ps_slow"] = tuple((pf.index("ps_slow PS", p), pf.positive("ps_slow factor", f))
                                          for p, f in dict(data["ps_slow"]).items())
            if "ps_interfere" in data:
                fields["ps_interfere"] = tuple(
                    Interference(pf.index("ps_interfere PS", i["ps"]),
                                 pf.positive("ps_interfere factor", i["factor"]),
                                 pf.positive("ps_interfere on_s", i["on_s"]),
                                 pf.positive("ps_interfere period_s", i["period_s"]))
                    for i in data["ps_interfere"])
        except (KeyError, TypeError, AttributeError) as e:
            raise ProfileError(f"Profile in {source} is malformed near {e!s}; see the JSON layout "
                               "in the tf_hetero.emulation.profile docstring.") from None
        return cls(**fields)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Profile":
        """The profile ``tf-hetero run --profile`` exported to this process (uniform if none)."""
        return cls.parse(_env.profile_spec(env))

    # ----------------------------------------------------------------- queries
    def spec(self) -> str:
        """An inline spec that :meth:`parse` turns back into an equal profile."""
        items = [f"base_ms={pf.num(self.base_ms)}"]
        if self.slowdowns:
            items.append("slowdowns=" + ",".join(pf.num(s) for s in self.slowdowns))
        if self.slow:
            items.append("slow=" + ",".join(f"{w}:{pf.num(s)}" for w, s in self.slow))
        if self.classes:
            items.append("classes=" + ",".join(f"{c.name}:{c.count}@{pf.num(c.slowdown)}"
                                               for c in self.classes))
        if self.straggle_p or self.straggle_k != 1.0:
            items.append(f"straggle={pf.num(self.straggle_p)}x{pf.num(self.straggle_k)}")
        if self.changes:
            items.append("change=" + ",".join(f"{c.worker}@{c.at_task}:{pf.num(c.slowdown)}"
                                              for c in self.changes))
        if self.link_mbps:
            items.append("link=" + ",".join(pf.num(r) for r in self.link_mbps))
        if self.ps_mbps:
            items.append("ps_mbps=" + ",".join(pf.num(r) for r in self.ps_mbps))
        if self.ps_slow:
            items.append("ps_slow=" + ",".join(f"{p}:{pf.num(f)}" for p, f in self.ps_slow))
        if self.ps_interfere:
            items.append("ps_interfere=" + ",".join(
                f"{i.ps}:{pf.num(i.factor)}@{pf.num(i.on_s)}/{pf.num(i.period_s)}" for i in self.ps_interfere))
        items += [f"seed={self.seed}", f"horizon={self.horizon}"]
        return ";".join(items)

    def check_workers(self, num_workers: int) -> None:
        """Raises :class:`ProfileError` if the profile does not fit ``num_workers`` workers."""
        if self.slowdowns and len(self.slowdowns) != num_workers:
            raise ProfileError(
                f"Profile 'slowdowns' lists {len(self.slowdowns)} factors but the cluster has "
                f"{num_workers} workers. Fix: give exactly {num_workers} factors, or use 'slow=W:F'.")
        n_class = sum(c.count for c in self.classes)
        if self.classes and n_class != num_workers:
            raise ProfileError(
                f"Profile 'classes' covers {n_class} workers but the cluster has {num_workers}. "
                f"Fix: make the class counts add up to {num_workers}.")
        if len(self.link_mbps) not in (0, 1, num_workers):
            raise ProfileError(
                f"Profile 'link' lists {len(self.link_mbps)} rates but the cluster has "
                f"{num_workers} workers. Fix: give one rate for every worker, or {num_workers}.")
        for w in [w for w, _ in self.slow] + [c.worker for c in self.changes]:
            if w >= num_workers:
                raise ProfileError(
                    f"Profile names worker {w} but the cluster has workers 0-{num_workers - 1}. "
                    "Fix: use an index in that range.")

    @property
    def emulates_ps(self) -> bool:
        """True if the profile emulates parameter servers (``ps_mbps`` set)."""
        return bool(self.ps_mbps)

    def check_ps(self, num_ps: int) -> None:
        """Raises :class:`ProfileError` if the PS items do not fit ``num_ps`` PS tasks.

        >>> try:
        ...     Profile.parse("ps_mbps=4;ps_slow=2:3").check_ps(2)
        ... except ProfileError as e:
        ...     print(e)
        Profile 'ps_slow' names PS 2 but the cluster has PS tasks 0-1. Fix: use an index in that range.
        """
        if len(self.ps_mbps) not in (0, 1, num_ps):
            raise ProfileError(
                f"Profile 'ps_mbps' lists {len(self.ps_mbps)} rates but the cluster has {num_ps} "
                f"PS tasks. Fix: give one rate for every PS, or {num_ps}.")
        named = [("ps_slow", p) for p, _ in self.ps_slow] + [("ps_interfere", i.ps)
                                                           for i in self.ps_interfere]
        for key, p in named:
            if p >= num_ps:
                raise ProfileError(
                    f"Profile '{key}' names PS {p} but the cluster has PS tasks 0-{num_ps - 1}. "
                    "Fix: use an index in that range.")

    def ps_us_per_byte(self, num_ps: int) -> tuple[float, ...]:
        """Service time per byte of each PS, microseconds (0: the PS is not emulated).

        >>> Profile.parse("ps_mbps=8,4").ps_us_per_byte(2)
        (0.125, 0.25)
        """
        self.check_ps(num_ps)
        if not self.ps_mbps:
            return (0.0,) * num_ps
        rates = self.ps_mbps * num_ps if len(self.ps_mbps) == 1 else self.ps_mbps
        slow = dict(self.ps_slow)
        return tuple(slow.get(p, 1.0) / rates[p] for p in range(num_ps))

    def ps_service_rates(self, num_ps: int) -> tuple[float, ...]:
        """Relative service rate of each PS (1 / its time per byte, the fastest 1.0): what
        ``placement="balanced"`` weighs loads by. Equal rates when no PS is emulated.

        >>> Profile.parse("ps_mbps=4;ps_slow=1:3").ps_service_rates(2)
        (1.0, 0.3333333333333333)
        """
        us = self.ps_us_per_byte(num_ps)
        if not any(us):
            return (1.0,) * num_ps
        fastest = min(us)
        return tuple(fastest / u for u in us)

    def link_us_per_byte(self, num_workers: int) -> tuple[float, ...]:
        """Emulated push delay per byte of each worker's link, microseconds (0: no delay).

        >>> Profile.parse("link=8,8,8,2").link_us_per_byte(4)
        (0.125, 0.125, 0.125, 0.5)
        """
        self.check_workers(num_workers)
        if not self.link_mbps:
            return (0.0,) * num_workers
        rates = self.link_mbps * num_workers if len(self.link_mbps) == 1 else self.link_mbps
        return tuple(1.0 / r for r in rates[:num_workers])  # 1 MB/s = 1 byte/us

    def constant_slowdowns(self, num_workers: int) -> tuple[float, ...]:
        """The constant factor of each worker (before changes and transient stragglers)."""
        self.check_workers(num_workers)
        if self.slowdowns:
            return tuple(float(s) for s in self.slowdowns)
        if self.classes:
            return tuple(float(c.slowdown) for c in self.classes for _ in range(c.count))
        out = [1.0] * num_workers
        for w, s in self.slow:
            out[w] = float(s)
        return tuple(out)

    def class_names(self, num_workers: int) -> tuple[str, ...]:
        """Hardware class of each worker (``"x<factor>"`` when no classes are named)."""
        if self.classes:
            self.check_workers(num_workers)
            return tuple(c.name for c in self.classes for _ in range(c.count))
        return tuple(f"x{s:g}" for s in self.constant_slowdowns(num_workers))

    def change_vectors(self, num_workers: int) -> tuple[np.ndarray, np.ndarray]:
        """Per worker: task index at which its change starts (huge if none), and the new factor.

        """
        self.check_workers(num_workers)
        at = np.full(num_workers, np.iinfo(np.int64).max, dtype=np.int64)
        factor = np.ones(num_workers, dtype=np.float64)
        for c in self.changes:  # at most one per worker (checked in __post_init__)
            at[c.worker], factor[c.worker] = c.at_task, c.slowdown
        return at, factor

    def straggle_table(self, num_workers: int) -> np.ndarray:
        """``[num_workers, horizon]`` transient factors (1 or k), seeded and reproducible."""
        rng = np.random.default_rng(self.seed)
        hits = rng.random((num_workers, self.horizon)) < self.straggle_p
        return np.where(hits, self.straggle_k, 1.0)

    def slowdown(self, worker: int, task: int, num_workers: int) -> float:
        """Total factor of worker ``worker``'s ``task``-th task (what emulation applies)."""
        if not 0 <= worker < num_workers or task < 0:
            raise ProfileError(f"slowdown(worker={worker}, task={task}): need 0 <= worker < "
                               f"{num_workers} and task >= 0.")
        const = self.constant_slowdowns(num_workers)[worker]
        at, factor = self.change_vectors(num_workers)
        base = factor[worker] if task >= at[worker] else const
        return float(base * self.straggle_table(num_workers)[worker, task % self.horizon])

    def expected_slowdowns(self, num_workers: int, task: int = 0) -> tuple[float, ...]:
        """Expected factor per worker at task index ``task`` (transient stragglers averaged)."""
        const = np.asarray(self.constant_slowdowns(num_workers))
        at, factor = self.change_vectors(num_workers)
        base = np.where(task >= at, factor, const)
        return tuple(float(x) for x in base * (1.0 + self.straggle_p * (self.straggle_k - 1.0)))
