"""Sweeps: efficiency and time to target versus cluster size and heterogeneity.

``--workers 4,16,64,256,1000``: every strategy at every size, a quarter of the workers
``slow`` times slower (``classes=fast:3N/4@1,slow:N/4@4``, which at 4 workers is the
one_slow scenario, ``slow=3:4``). ``--profile-sweep``: at one size, that quarter 1, 2, 4, 8
and 16 times slower. Every point is one simulated bench row (:mod:`.run`) of ``rounds`` x N
micro-batches in 4 epochs, so every size runs the same number of BSP-sized rounds, at the
bench's learning-rate rule (a diverging run is not stopped: its throughput still counts, its
time to target is "not reached"). Each point has its efficiency over the whole run and once
under way (``steady_efficiency``: without the set-up and first steps, which weigh heavily in
a run of 100 rounds). ``launch="tokens"``: every row but stock PSS, which cannot take
tokens, launches its rounds as tokens (:class:`~tf_hetero.sim.dispatcher.SimDispatcher`).

>>> quarter_slow(4, 4)
'classes=fast:3@1,slow:1@4'
>>> quarter_slow(1000, 2)
'classes=fast:750@1,slow:250@2'
>>> parse_workers("4,16")
[4, 16]
>>> parse_workers("4,x")
Traceback (most recent call last):
...
ValueError: --workers '4,x': need whole numbers >= 1 separated by commas, e.g. 4,16,64,256,1000.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["quarter_slow", "parse_workers", "SweepPoint", "sweep", "plot", "SLOW_FACTORS"]

#: Slowdowns of the slow quarter in a heterogeneity sweep (1: a homogeneous cluster).
SLOW_FACTORS = (1, 2, 4, 8, 16)


def quarter_slow(workers: int, slow: float) -> str:
    """The profile of a cluster whose last quarter (at least one worker) is ``slow`` x slower."""
    n_slow = max(1, workers // 4)
    if workers == 1:
        return f"slowdowns={slow:g}"
    return f"classes=fast:{workers - n_slow}@1,slow:{n_slow}@{slow:g}"


def parse_workers(text: str) -> list[int]:
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise ValueError(f"--workers {text!r}: need whole numbers >= 1 separated by commas, "
                         "e.g. 4,16,64,256,1000.")
    return values


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    strategy: str
    workers: int
    profile: str
    slow: float
    samples_per_sec: float
    efficiency: float
    time_to_target_s: float | None
    final_accuracy: float
    steady_efficiency: float = math.nan
    launch: str = "closures"


def sweep(strategies, workers, slow_factors, base_cfg, costs, *, rounds: int = 100,
          learn: bool = True, progress=None, launch: str = "closures") -> list[SweepPoint]:
    """One simulated row per strategy, size and slow factor (see the module)."""
    from tf_hetero.sim.run import row_launch, simulate_run

    points = []
    for n in workers:
        for slow in slow_factors:
            profile = quarter_slow(n, slow)
            tasks = rounds * n
            cfg = dataclasses.replace(base_cfg, workers=n, profile=profile, tasks=tasks,
                                      steps_per_epoch=tasks // 4 if rounds % 4 == 0 else tasks)
            for spec in strategies:
                r = simulate_run(spec, cfg, costs, learn=learn, stop_on_divergence=False,
                                 launch=row_launch(spec, launch))
                points.append(SweepPoint(spec, n, profile, slow, r["samples_per_sec"],
                                         r["efficiency"], r["time_to_target_s"],
                                         r["final_accuracy"], r["steady_efficiency"],
                                         r["launch"]))
                if progress:
                    progress(points[-1])
    return points


def plot(points, path: str, x: str = "workers", title: str = "") -> str:
    """Efficiency and time to target against ``x`` (``"workers"`` or ``"slow"``), one line
    per strategy; a target never reached leaves a gap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for spec in dict.fromkeys(p.strategy for p in points):
        mine = sorted((p for p in points if p.strategy == spec), key=lambda p: getattr(p, x))
        xs = [getattr(p, x) for p in mine]
        line, = axes[0].plot(xs, [p.efficiency for p in mine], marker="o", label=spec)
        axes[0].plot(xs, [p.steady_efficiency for p in mine], linestyle="--",
                     color=line.get_color())  # once under way
        axes[1].plot(xs, [math.nan if p.time_to_target_s is None else p.time_to_target_s
                          for p in mine], marker="o", label=spec)
    label = "workers" if x == "workers" else "slowdown of the slow quarter"
    for ax, name in zip(axes, ("cluster efficiency (samples/s over ideal)",
                               "time to target accuracy (s; gap: not reached)")):
        ax.set_xscale("log", base=2 if x == "slow" else 10)
        ax.set_xlabel(label)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, 1.05)
    axes[1].set_ylim(bottom=0)
    axes[0].legend(title="dashed: once under way", title_fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
