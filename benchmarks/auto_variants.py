"""AutoStrategy's settings side by side with stock PSS and H-PS on one scenario: each row at a
learning-rate factor of its own (stock PSS at the rule, H-PS at its best, 2x the rule; the
adaptive rows at the one-batch rate, which is all they take), every repeat in a shuffled order
on one cluster, as `tf-hetero bench` runs them (same warm-up, clock, meters and report).

    flock /tmp/heavy.lock .venv/bin/python benchmarks/auto_variants.py one_slow 3 OUT_DIR \
        pss:1 hps:2 auto auto@start=rounds,async_tuned=sqrt

A row ``auto@k=v,...`` is AutoStrategy with those AutoConfig settings (``True``/``False`` for
a flag). ``NAME:FACTOR:M`` runs a row at momentum ``M`` with ``lr / (1 - M)`` held at the
factor's value (`tf-hetero bench --lr-grid`'s momentum grid); several points of one row are
reported at its best, as the bench's grid is (``pss:0.5:0 pss:1:0 pss:1:0.9 ...``).
"""

from __future__ import annotations

import os
import random
import sys

import tf_hetero  # noqa: F401  (quiet TensorFlow logs first)
from tf_hetero.emulation.profile import Profile
from tf_hetero.policies.auto import AutoConfig
from tf_hetero.strategies import config as configs
from tf_hetero.strategies import registry
from tf_hetero.tools import bench
from tf_hetero.tools.benchrow import run_strategy
from tf_hetero.tools.scenarios import load_scenarios


def _setting(v: str):
    """An ``auto@k=v`` value: a flag (``True``/``False``), an int, a float or the text."""
    if v in ("True", "False"):
        return v == "True"
    if v.isdigit():
        return int(v)
    return float(v) if v.replace(".", "", 1).isdigit() else v


def _auto_row(spec: str) -> str:
    """Registers ``auto@k=v,...`` under a name of its own; returns the name."""
    name, _, settings = spec.partition("@")
    kwargs = {}
    for item in filter(None, settings.split(",")):
        k, _, v = item.partition("=")
        kwargs[k] = _setting(v)
    config = AutoConfig(**kwargs)
    row = "auto" + "".join(f"-{k}{v}" for k, v in kwargs.items()).replace("_", "")
    # Registry names are lowercase letters: digits are spelled as letters (0 -> a, 1 -> b...).
    row = "".join(chr(ord("a") + int(c)) if c.isdigit() else c.lower()
                  for c in row if c.isalnum() or c == "-").replace("-", "x")

    def create(resolver, arg, **options):
        from tf_hetero.strategies.auto import AutoStrategy

        return AutoStrategy(resolver, settings=config, **options)

    registry.register(row, create, config=lambda n, a: configs.auto(n, settings=config),
                      help=f"AutoStrategy {settings}", replace=True)
    return row


def main(scenario: str, repeats: int, out_dir: str, rows: list[str]) -> None:
    (sc,) = load_scenarios(scenario)
    specs = []
    for r in rows:
        name, _, point = r.partition(":")
        factor, _, momentum = point.partition(":")
        name = _auto_row(name) if name.startswith("auto@") else name
        specs.append((name, float(factor or 1.0), float(momentum) if momentum else None))
    cfg = sc.config(strategies=tuple(dict.fromkeys(n for n, _, _ in specs)), repeats=repeats,
                    out_dir=out_dir, json_path=os.path.join(out_dir, "bench.json"))
    profile = Profile.parse(cfg.profile)
    os.makedirs(out_dir, exist_ok=True)
    from tf_hetero.cluster.local import LocalCluster
    from tf_hetero.telemetry.cpu import CpuMeter
    from tf_hetero.telemetry.traffic import TrafficMeter

    runs, failed = [], {}
    with LocalCluster(cfg.workers, cfg.ps, profile=profile, processes=True) as cluster:
        meter, cpu = TrafficMeter.for_cluster(cluster), CpuMeter.for_cluster(cluster)
        bench.warm_up(cluster, cfg, profile)
        for rep in range(repeats):
            order = list(specs)
            random.Random(cfg.seed + rep).shuffle(order)
            print(f"[auto_variants] repeat {rep + 1}/{repeats}: {order}", flush=True)
            for name, factor, momentum in order:
                try:
                    run = run_strategy(name, cluster, cfg, profile, factor, meter,
                                       seed=cfg.seed + rep, cpu_meter=cpu, momentum=momentum)
                except Exception as e:  # pylint: disable=broad-except
                    # As `tf-hetero bench`: one broken row must not lose the others' runs.
                    failed.setdefault(name, bench.failure_line(e))
                    print(f"[auto_variants] {name} failed: {failed[name]}", flush=True)
                    continue
                run["repeat"] = rep
                runs.append(run)
    bench._write_report(cfg, runs, failed)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:])
