"""The ``tf-hetero`` command.

    tf-hetero launch [-- PROGRAM ARGS...]     serve this process's TF_CONFIG role
    tf-hetero run --workers N --ps M [--profile SPEC] -- PROGRAM ARGS...
                                              a whole local cluster, PROGRAM as chief
    tf-hetero demo [--strategies pss,auto,hps,epsp,bsp | --strategy X] [--profile slow=3:4 ...]
    tf-hetero tfconfig --name JOB --workers N --ps M [--namespace NS --port 2222 --json]
    tf-hetero bench --strategies pss,bsp,backup,ssp --workers 4 --ps 2 --profile slow=3:4
    tf-hetero sim --strategies bsp,epsp --workers 4,16,64,256,1000   (simulated; docs/SIMULATOR.md)

``launch``: as worker/ps, start the server and block until SIGTERM/SIGINT (exit 0); as chief,
replace this process with PROGRAM; as evaluator, say it is not used and exit 0. TF_CONFIG is
validated first; a bad one exits 2 with a one-line error.

``run``: start ``N`` worker and ``M`` PS processes on 127.0.0.1, each with its own TF_CONFIG,
then PROGRAM with the chief's TF_CONFIG and ``TF_HETERO_PROFILE``. When PROGRAM exits, fails,
or ``run`` gets Ctrl-C/SIGTERM, every process it started is stopped; its exit code is
PROGRAM's (130 after Ctrl-C).

TensorFlow's C++ log lines are kept out of every command's output (and out of the processes
they start); ``--tf-logs`` or ``TF_HETERO_TF_LOGS=1`` shows them (:mod:`tf_hetero.tflogs`).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

__all__ = ["main"]

#: Seconds PROGRAM gets to exit after the SIGINT that ``run`` forwards, before SIGTERM, and
#: again before SIGKILL.
PROGRAM_GRACE_S = 10.0


class _UsageError(Exception):
    pass


def _command(args) -> list[str]:
    cmd = list(args.command or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return cmd


def cmd_launch(args) -> int:
    from tf_hetero.cluster.roles import (exit_without_tf_teardown, serve_unless_chief,
                                         without_keras)
    from tf_hetero.cluster.tf_config import parse_tf_config

    config = parse_tf_config()
    if config.task.role in ("worker", "ps"):
        without_keras()
    # A TF server cannot be stopped: a worker or ps exits without TF's teardown.
    if not serve_unless_chief(config, exit_without_tf_teardown):
        return 0
    cmd = _command(args)
    if not cmd:
        raise _UsageError("this process is the chief (TF_CONFIG task type 'chief') but no training "
                          "program was given. Fix: tf-hetero launch -- python train.py")
    try:
        os.execvp(cmd[0], cmd)
    except FileNotFoundError:
        raise _UsageError(f"training program {cmd[0]!r} not found. Fix: give a command on PATH "
                          "or a path to an executable.") from None


def cmd_run(args) -> int:
    from tf_hetero import tflogs
    from tf_hetero.cluster.local import LocalCluster, die_with_parent

    cmd = _command(args)
    if not cmd:
        raise _UsageError("no training program given. Fix: tf-hetero run --workers 4 --ps 2 -- "
                          "python train.py")
    interrupted: list[int] = []

    def on_signal(signum, _frame):
        interrupted.append(signum)

    try:
        cluster = LocalCluster(args.workers, args.ps, profile=args.profile, processes=True,
                               log_dir=args.log_dir, start_timeout=args.start_timeout)
    except ValueError as e:
        raise _UsageError(str(e)) from None
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    program = relay = None
    try:
        print(f"tf-hetero run: starting {args.workers} workers and {args.ps} PS on 127.0.0.1",
              flush=True)
        cluster.start()
        if interrupted:
            return 130
        print(f"tf-hetero run: cluster up (server logs in {cluster.log_dir}); running: "
              f"{' '.join(cmd)}", flush=True)
        try:
            program = subprocess.Popen(cmd, env=cluster.chief_env(), start_new_session=True,
                                       preexec_fn=die_with_parent,
                                       stderr=None if tflogs.wanted() else subprocess.PIPE)
        except FileNotFoundError:
            raise _UsageError(f"training program {cmd[0]!r} not found.") from None
        # Its stderr without TensorFlow's INFO/WARNING lines, whatever it imports first.
        relay = tflogs.relay(program.stderr, sys.stderr) if program.stderr else None
        forwarded_at = None
        while program.poll() is None:
            if interrupted and forwarded_at is None:
                forwarded_at = time.monotonic()
                _signal_group(program, signal.SIGINT)
            elif forwarded_at is not None and time.monotonic() - forwarded_at > PROGRAM_GRACE_S:
                break
            time.sleep(0.1)
        if interrupted:
            return 130
        return program.returncode if program.returncode >= 0 else 128 - program.returncode
    finally:
        if program is not None:
            _stop_group(program)
            if relay is not None:
                relay.join(timeout=PROGRAM_GRACE_S)  # its last lines
        cluster.stop()
        for s, handler in old.items():
            signal.signal(s, handler)
        print("tf-hetero run: cluster stopped", flush=True)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _stop_group(proc: subprocess.Popen) -> None:
    """Stops the program and everything it started in its session (SIGTERM, then SIGKILL)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal_group(proc, sig)
        try:
            proc.wait(timeout=PROGRAM_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue
    _signal_group(proc, signal.SIGKILL)  # grandchildren left in the group


def _rows(args) -> tuple:
    """The rows of ``--strategies``, each in Keras 3 with ``--keras 3``."""
    from tf_hetero.tools.benchconfig import in_keras3

    rows = tuple(args.strategies.split(","))
    return in_keras3(rows) if args.keras == 3 else rows


def cmd_demo(args) -> int:
    from tf_hetero.tools.demo import DemoConfig, compare_config, run_comparison, run_demo

    try:
        if args.strategy:  # one strategy in detail
            if args.keras == 3:
                raise ValueError(f"demo --strategy {args.strategy} --keras 3: the one-strategy "
                                 "view trains tf_keras models only. Fix: drop --strategy (the "
                                 "comparison runs its rows in Keras 3), or drop --keras 3.")
            cfg = DemoConfig(workers=args.workers, ps=args.ps, profile=args.profile,
                             model=args.model, epochs=args.epochs,
                             steps_per_epoch=args.steps_per_epoch, batch_size=args.batch_size,
                             out_dir=args.out_dir, processes=not args.in_process,
                             strategy=args.strategy)
        else:  # the strategies side by side, on the benchmark's settings
            cfg = compare_config(_rows(args), workers=args.workers, ps=args.ps,
                                 profile=args.profile, model=args.model, tasks=args.tasks,
                                 steps_per_epoch=args.steps_per_epoch,
                                 batch_size=args.batch_size, out_dir=args.out_dir)
    except ValueError as e:
        raise _UsageError(str(e)) from None
    (run_demo if args.strategy else run_comparison)(cfg)
    return 0


def cmd_tfconfig(args) -> int:
    import json

    from tf_hetero.tools.tfjob import format_tf_configs, tfjob_tf_configs

    try:
        configs = tfjob_tf_configs(args.name, args.namespace, chief=args.chief,
                                   workers=args.workers, ps=args.ps, evaluator=args.evaluator,
                                   port=args.port, cluster_domain=args.cluster_domain)
    except ValueError as e:  # TFConfigError too
        raise _UsageError(str(e)) from None
    print(json.dumps(configs, indent=1) if args.json
          else format_tf_configs(configs, args.name, args.namespace))
    return 0


#: ``--keras``: the comparison's rows in tf_keras (2) or Keras 3 (3).
KERAS_HELP = ("3: every row's model in Keras 3 (import keras; NAME+keras3), beside the "
              "reference row pss in tf_keras; 2: tf_keras (the default)")

#: ``--lr-grid``: learning rates tried per strategy, as factors of the linear rule.
LR_GRID = (0.5, 1.0, 2.0)
#: ``--lr-grid``: stock PSS's momenta too (``lr / (1 - m)`` held at each factor's value).
MOMENTUM_GRID = (0.9, 0.5, 0.0)


def _data_per_worker(args) -> dict:
    """``--data-per-worker`` if given (else the scenario's or BenchConfig's default)."""
    return {} if args.data_per_worker is None else {"data_per_worker": args.data_per_worker}


def cmd_bench(args) -> int:
    from tf_hetero.tools.bench import run_bench
    from tf_hetero.tools.benchconfig import BenchConfig
    from tf_hetero.tools.scenarios import load_scenarios, run_scenarios

    try:
        strategies = _rows(args)
        if args.scenario:
            scenarios = load_scenarios(args.scenario, args.scenario_dir)
        else:
            cfg = BenchConfig(strategies=strategies, workers=args.workers,
                              ps=args.ps, profile=args.profile, model=args.model,
                              dataset=args.dataset, tasks=args.tasks,
                              steps_per_epoch=args.steps_per_epoch, batch_size=args.batch_size,
                              steps_per_execution=args.steps_per_execution,
                              target_accuracy=args.target_accuracy, out_dir=args.out_dir,
                              base_lr=args.base_lr, momentum=args.momentum,
                              json_path=args.json, repeats=args.repeats,
                              lr_factors=LR_GRID if args.lr_grid else (1.0,),
                              momenta=MOMENTUM_GRID if args.lr_grid else (),
                              warmup_updates=args.warmup_updates,
                              round_profile=args.round_profile,
                              **_data_per_worker(args))
    except ValueError as e:
        raise _UsageError(str(e)) from None
    if args.scenario:
        _, failed = run_scenarios(scenarios, os.path.join(args.out_dir, "scenarios"),
                                  strategies=strategies, repeats=args.repeats,
                                  lr_factors=LR_GRID if args.lr_grid else (1.0,),
                                  momenta=MOMENTUM_GRID if args.lr_grid else (),
                                  warmup_updates=args.warmup_updates,
                                  round_profile=args.round_profile,
                                  **_data_per_worker(args))
    else:
        failed = {}
        run_bench(cfg, failed)
    return 1 if failed else 0


def cmd_sim(args) -> int:
    from tf_hetero.tools.sim import main as sim_main

    try:
        return sim_main(args)
    except ValueError as e:  # a bad option, calibration file or strategy: one line, exit 2
        raise _UsageError(str(e)) from None


def _parser() -> argparse.ArgumentParser:
    from tf_hetero.strategies import registry  # pure imports: --help loads no TensorFlow

    strategy_help = ("a registered name, a number after it sets its [argument]: "
                     + registry.help_text())
    p = argparse.ArgumentParser(prog="tf-hetero", description=__doc__.split("\n\n")[0])
    tf_logs_help = ("show TensorFlow's C++ log lines (here and in the processes started); "
                    "same as TF_HETERO_TF_LOGS=1")
    p.add_argument("--tf-logs", action="store_true", help=tf_logs_help)
    common = argparse.ArgumentParser(add_help=False)  # also accepted after the command
    common.add_argument("--tf-logs", action="store_true", default=argparse.SUPPRESS,
                        help=tf_logs_help)
    sub = p.add_subparsers(dest="cmd", required=True)
    _launch_parser(sub, common)
    _run_parser(sub, common)
    _demo_parser(sub, common, strategy_help)
    _tfconfig_parser(sub, common)
    _bench_parser(sub, common, strategy_help)
    from tf_hetero.tools import sim as sim_command  # pure: no TensorFlow

    sim = sub.add_parser("sim", help="the bench on a simulated cluster (no TensorFlow); "
                                     "calibration; sweeps to 1000 workers")
    sim_command.add_arguments(sim)
    sim.set_defaults(fn=cmd_sim)
    return p


def _launch_parser(sub, common) -> None:
    launch = sub.add_parser("launch", help="serve this process's TF_CONFIG role",
                            parents=[common])
    launch.add_argument("command", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS (chief)")
    launch.set_defaults(fn=cmd_launch)


def _run_parser(sub, common) -> None:
    run = sub.add_parser("run", help="run PROGRAM as chief of a local multi-process cluster",
                         parents=[common])
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--ps", type=int, default=1)
    run.add_argument("--profile", default=None,
                     help="heterogeneity profile: inline spec (e.g. 'slow=3:4') or JSON file")
    run.add_argument("--log-dir", default=None, help="server logs (default: a temporary folder)")
    run.add_argument("--start-timeout", type=float, default=120.0,
                     help="seconds to wait for the servers to listen")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS")
    run.set_defaults(fn=cmd_run)


def _demo_parser(sub, common, strategy_help: str) -> None:
    from tf_hetero import models

    demo = sub.add_parser("demo", help="stock PSS and tf-hetero strategies on one heterogeneous "
                                       "local cluster: one table, one figure", parents=[common])
    demo.add_argument("--workers", type=int, default=4)
    demo.add_argument("--ps", type=int, default=2)
    demo.add_argument("--profile", default="slow=3:4")
    demo.add_argument("--strategies", default="pss,auto,hps,epsp,bsp",
                      help="the strategies compared (pss is always run); the benchmark's data, "
                           "sample budget and learning-rate rule")
    demo.add_argument("--strategy", default=None,
                      help="show this one strategy in detail instead; " + strategy_help)
    demo.add_argument("--model", default="mlp", choices=sorted(models.MODELS))
    demo.add_argument("--keras", type=int, default=2, choices=(2, 3), help=KERAS_HELP)
    demo.add_argument("--tasks", type=int, default=400,
                      help="comparison: sample budget in micro-batches")
    demo.add_argument("--epochs", type=int, default=4, help="--strategy: epochs")
    demo.add_argument("--steps-per-epoch", type=int, default=100)
    demo.add_argument("--batch-size", type=int, default=32)
    demo.add_argument("--out-dir", default="runs/demo")
    demo.add_argument("--in-process", action="store_true",
                      help="--strategy: servers inside this process instead of separate "
                           "processes")
    demo.set_defaults(fn=cmd_demo)


def _tfconfig_parser(sub, common) -> None:
    tfconfig = sub.add_parser("tfconfig", help="the TF_CONFIG each replica of a Kubeflow TFJob "
                                               "gets, checked (examples/k8s)", parents=[common])
    tfconfig.add_argument("--name", required=True, help="the TFJob's metadata.name")
    tfconfig.add_argument("--namespace", default="default")
    tfconfig.add_argument("--chief", type=int, default=1, help="Chief replicas")
    tfconfig.add_argument("--workers", type=int, required=True, help="Worker replicas")
    tfconfig.add_argument("--ps", type=int, required=True, help="PS replicas")
    tfconfig.add_argument("--evaluator", type=int, default=0, help="Evaluator replicas")
    tfconfig.add_argument("--port", type=int, default=2222,
                          help="the container port named tfjob-port")
    tfconfig.add_argument("--cluster-domain", default="",
                          help="the operator's CUSTOM_CLUSTER_DOMAIN, if set")
    tfconfig.add_argument("--json", action="store_true", help="{pod: TF_CONFIG} as JSON")
    tfconfig.set_defaults(fn=cmd_tfconfig)


def _bench_parser(sub, common, strategy_help: str) -> None:
    from tf_hetero import models
    from tf_hetero.data import PER_WORKER

    bench = sub.add_parser("bench", help="strategies side by side on one local cluster",
                           parents=[common])
    bench.add_argument("--strategies", default="pss,asp,bsp,backup,ssp",
                       help="comma-separated (pss is always run); NAME@balanced: load-aware "
                       "placement; NAME+rebalance: live rebalancing across PS tasks; NAME+keras3: the "
                       "row's model in Keras 3 (import keras), not tf_keras; NAME+failover[N]: "
                       "PS failover, a copy every N (8) applied rounds; NAME#2: a second "
                       "row of the same settings (a control); " + strategy_help)
    bench.add_argument("--workers", type=int, default=4)
    bench.add_argument("--ps", type=int, default=2)
    bench.add_argument("--profile", default="slow=3:4")
    bench.add_argument("--model", default="mlp", choices=sorted(models.MODELS))
    bench.add_argument("--keras", type=int, default=2, choices=(2, 3), help=KERAS_HELP)
    bench.add_argument("--dataset", default="digits",
                       help="offline: digits (quick), mnist1d (with --model cnn1d: batch size "
                            "matters); or a tensorflow-datasets name (needs internet)")
    bench.add_argument("--tasks", type=int, default=400, help="sample budget in micro-batches")
    bench.add_argument("--steps-per-epoch", type=int, default=100)
    bench.add_argument("--batch-size", type=int, default=32)
    bench.add_argument("--steps-per-execution", type=int, default=1,
                       help="micro-batches per task (Keras steps_per_execution)")
    bench.add_argument("--target-accuracy", type=float, default=0.9)
    bench.add_argument("--base-lr", type=float, default=0.02,
                       help="SGD learning rate per micro-batch; x micro-batches per update")
    bench.add_argument("--momentum", type=float, default=0.9)
    bench.add_argument("--lr-grid", action="store_true",
                       help="run every strategy at 0.5, 1 and 2 x the linear lr rule (stock "
                            "PSS also at momentum 0.9, 0.5 and 0, lr / (1 - m) held) and "
                            "report each at its best time to target; auto runs at the rule "
                            "only (it sets its own step)")
    bench.add_argument("--warmup-updates", type=int, default=None,
                       help="ramp the lr up linearly over this many updates for strategies "
                            "whose update averages several micro-batches (Goyal et al.); "
                            "default: as many updates as an update averages micro-batches; "
                            "0: none")
    bench.add_argument("--data-per-worker", default=None, choices=PER_WORKER,
                       help="shard: each worker reads its own 1/N of the training set; "
                            "reshuffle: each reads all of it in its own order (unbiased "
                            "when workers read at different rates; the default)")
    bench.add_argument("--scenario", default=None,
                       help="a named scenario of --scenario-dir (comma list, or 'all'): its "
                            "file sets the cluster, profile, data and budget; --strategies, "
                            "--repeats and --out-dir still apply")
    bench.add_argument("--scenario-dir", default=os.path.join("benchmarks", "scenarios"))
    bench.add_argument("--round-profile", action="store_true",
                       help="time each round's (each stock step's) phases along its critical "
                            "path, from stamps every step writes on its worker; a table of "
                            "them, adding up to the round, beside CPU ms per round by process "
                            "(docs/MEASUREMENT.md)")
    bench.add_argument("--repeats", type=int, default=1,
                       help="runs per strategy, each repeat in a shuffled order; the table "
                            "gives median [min-max]")
    bench.add_argument("--out-dir", default="runs/bench")
    bench.add_argument("--json", default=None, help="JSON path (.md and .png written beside it)")
    bench.set_defaults(fn=cmd_bench)


def main(argv: list[str] | None = None) -> int:
    from tf_hetero import tflogs

    args = _parser().parse_args(argv)
    # TensorFlow's C++ log lines (CUDA probing, oneDNN notes) drown the output of a CPU
    # cluster: quiet here and in every process started from here (import tf_hetero did it),
    # unless --tf-logs / TF_HETERO_TF_LOGS=1. Errors still show.
    if getattr(args, "tf_logs", False):
        tflogs.show()
    else:
        tflogs.quiet()
    from tf_hetero.emulation.profile import ProfileError
    from tf_hetero.cluster.tf_config import TFConfigError

    try:
        return args.fn(args) or 0
    except (_UsageError, TFConfigError, ProfileError) as e:
        print(f"tf-hetero {args.cmd}: error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
