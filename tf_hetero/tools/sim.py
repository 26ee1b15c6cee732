"""``tf-hetero sim``: the bench on a simulated cluster, calibration, and sweeps.

    tf-hetero sim --strategies bsp,hps,epsp --workers 4 --profile slow=3:4 --json runs/sim/a.json
    tf-hetero sim --strategies bsp,backup,epsp,hps,pss --workers 4,16,64,256,1000 --out-dir runs/sim
    tf-hetero sim --strategies bsp,epsp --workers 64 --profile-sweep
    tf-hetero sim --strategies hps,hpsoverlap --workers 4,64,256,1000 --launch tokens --throughput-only
    tf-hetero sim --calibrate runs/validate/one_slow.json --costs my_costs.json

A single size writes what ``tf-hetero bench`` writes (the same JSON keys, the Markdown table
and the PNG, by the bench's own report functions, plus ``"simulated": true`` per row); a list
of sizes or ``--profile-sweep`` writes ``sweep.json`` and ``sweep.png`` (:mod:`.sweep`).
A command (the library, :mod:`tf_hetero.sim` included, never imports the tools): it reuses
the bench's configuration (:mod:`tf_hetero.tools.benchconfig`) and report
(:mod:`tf_hetero.tools.report`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time

__all__ = ["main"]


def add_arguments(p) -> None:
    """The ``sim`` subcommand's options (the bench's, plus the simulator's).

    >>> import argparse
    >>> p = argparse.ArgumentParser(); add_arguments(p)
    >>> a = p.parse_args(["--workers", "4,16", "--profile-sweep"])
    >>> a.workers, a.profile_sweep, a.rounds
    ('4,16', True, 100)
    """
    p.add_argument("--strategies", default="pss,asp,bsp,backup,ssp,epsp,hps",
                   help="comma-separated registered names (pss is always run)")
    p.add_argument("--workers", default="4", help="a size, or a comma list: a sweep")
    p.add_argument("--ps", type=int, default=2)
    p.add_argument("--profile", default="slow=3:4",
                   help="heterogeneity profile, as for bench (one size only)")
    p.add_argument("--profile-sweep", action="store_true",
                   help="sweep the slowdown of a quarter of the workers (1, 2, 4, 8, 16)")
    p.add_argument("--rounds", type=int, default=100,
                   help="sweeps: BSP-sized rounds per point (rounds x N micro-batches)")
    p.add_argument("--tasks", type=int, default=400, help="sample budget in micro-batches")
    p.add_argument("--steps-per-epoch", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--model", default="mlp",
                   help="the statistical model's network: mlp (on digits or mnist1d) or "
                        "cnn1d (on mnist1d), as the bench's --model")
    p.add_argument("--dataset", default="digits", help="digits or mnist1d (both offline)")
    p.add_argument("--steps-per-execution", type=int, default=1)
    p.add_argument("--base-lr", type=float, default=0.02)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--target-accuracy", type=float, default=0.9)
    p.add_argument("--warmup-updates", type=int, default=None,
                   help="as tf-hetero bench (default: as many updates as an update averages "
                        "micro-batches; 0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--launch", choices=("closures", "tokens"), default="closures",
                   help="how a round strategy's tasks reach their workers: a closure each "
                        "(as the runtime does) or a token to a long-running closure (record "
                        "0017's design, simulated only; stock PSS keeps closures)")
    p.add_argument("--throughput-only", action="store_true",
                   help="no statistical model (no accuracy; faster at thousands of workers)")
    p.add_argument("--costs", default=None,
                   help="cost-model JSON (default: the calibration shipped in tf_hetero/sim)")
    p.add_argument("--calibrate", default=None, metavar="BENCH.json",
                   help="fit the cost model from a measured bench JSON; writes --costs "
                        "(default: print it)")
    p.add_argument("--out-dir", default="runs/sim")
    p.add_argument("--json", default=None, help="JSON path (.md and .png written beside it)")


def main(args) -> int:
    from tf_hetero.sim import costs as costs_module
    from tf_hetero.sim.calibrate import fit_file
    from tf_hetero.sim.sweep import SLOW_FACTORS, parse_workers

    if args.calibrate:
        model = fit_file(args.calibrate, args.costs)
        print(json.dumps(model.to_dict(), indent=1))
        if args.costs:
            print(f"[tf-hetero sim] wrote {args.costs}")
        return 0
    costs = costs_module.load(args.costs)
    workers = parse_workers(args.workers)
    sweeping = len(workers) > 1 or args.profile_sweep
    cfg = _config(args, workers[0], args.profile if not sweeping else None)
    learn = not args.throughput_only
    if sweeping:
        return _sweep(args, cfg, costs, workers, SLOW_FACTORS if args.profile_sweep else (4,),
                      learn)
    return _bench(cfg, costs, learn, args.launch)


def _config(args, workers: int, profile):
    from tf_hetero.sim.sweep import quarter_slow
    from tf_hetero.tools.benchconfig import BenchConfig

    tasks, spe = args.tasks, args.steps_per_epoch
    if profile is None:  # a sweep: its own budget per size (see sweep.py)
        profile, tasks = quarter_slow(workers, 4), args.rounds * workers
        spe = tasks // 4 if args.rounds % 4 == 0 else tasks
    return BenchConfig(strategies=tuple(args.strategies.split(",")), workers=workers,
                       ps=args.ps, profile=profile, tasks=tasks, steps_per_epoch=spe,
                       model=args.model, dataset=args.dataset,
                       batch_size=args.batch_size, steps_per_execution=args.steps_per_execution,
                       base_lr=args.base_lr, momentum=args.momentum,
                       target_accuracy=args.target_accuracy, warmup_updates=args.warmup_updates,
                       seed=args.seed, out_dir=args.out_dir, json_path=args.json)


def _bench(cfg, costs, learn: bool, launch: str = "closures") -> int:
    """One simulated bench: the bench's rows, table, JSON and PNG."""
    from tf_hetero.sim.run import row_launch, simulate_run
    from tf_hetero.tools import report

    runs = []
    for spec in cfg.strategies:
        t = time.perf_counter()
        runs.append(simulate_run(spec, cfg, costs, learn=learn,
                                 launch=row_launch(spec, launch)))
        print(f"[tf-hetero sim] {spec}: {runs[-1]['samples_per_sec']:.0f} samples/s "
              f"(simulated in {time.perf_counter() - t:.1f}s)", flush=True)
    # Without the statistical model the accuracy is NaN (shown as nan, never a divergence).
    results = report.summarize(runs, cfg.strategies, runs[0]["num_classes"])
    ideal = statistics.median(r["ideal_samples_per_sec"] for r in results)
    table = (f"Simulated (tf-hetero sim; cost model: {costs.source})\n\n"
             + report.format_table(results, cfg, ideal))
    print("\n" + table + "\n", flush=True)
    stem = (os.path.splitext(cfg.json_path)[0] if cfg.json_path
            else os.path.join(cfg.out_dir, "sim"))
    report.write(stem, {"config": dataclasses.asdict(cfg), "ideal_samples_per_sec": ideal,
                        "results": results, "runs": runs, "costs": costs.to_dict()}, table,
                 (lambda path: report.plot_runs(results, cfg, path)) if learn else None)
    outputs = ".json, .md and .png" if learn else ".json, .md"
    print(f"[tf-hetero sim] wrote {stem}{outputs}", flush=True)
    return 0


def _sweep(args, cfg, costs, workers, slow_factors, learn: bool) -> int:
    from tf_hetero.sim import sweep

    def show(p):
        ttt = "not reached" if p.time_to_target_s is None else f"{p.time_to_target_s:.1f}s"
        print(f"[tf-hetero sim] {p.strategy} N={p.workers} slow x{p.slow:g} ({p.launch}): "
              f"efficiency {p.efficiency:.3f}, under way {p.steady_efficiency:.3f}, "
              f"time to target {ttt}", flush=True)

    points = sweep.sweep(cfg.strategies, workers, slow_factors, cfg, costs,
                         rounds=args.rounds, learn=learn, progress=show, launch=args.launch)
    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, "profile_sweep" if args.profile_sweep else "sweep")
    with open(stem + ".json", "w") as f:
        json.dump({"costs": costs.to_dict(), "rounds": args.rounds, "launch": args.launch,
                   "points": [dataclasses.asdict(p) for p in points]}, f, indent=1)
    x = "slow" if args.profile_sweep else "workers"
    what = (f"{workers[0]} workers, a quarter of them slower" if args.profile_sweep
            else "a quarter of the workers 4x slower")
    launch = "" if args.launch == "closures" else "; round strategies launched as tokens"
    sweep.plot(points, stem + ".png", x=x, title=f"Simulated: {what} ({args.rounds} rounds of "
               f"N x {cfg.batch_size} samples, {cfg.model} on {cfg.dataset}{launch})")
    print(f"[tf-hetero sim] wrote {stem}.json and .png", flush=True)
    return 0
