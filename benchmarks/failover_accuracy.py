"""Final accuracy of fits in which a PS died and failed over, beside the run-to-run spread of
undisturbed fits (issue 51's accuracy target).

    .venv/bin/python benchmarks/failover_accuracy.py OUT [--strategies bsp,hps,asp] \\
        [--repeats 3] [--first-seed 1] [--every 8]

Each run is its own chief process on its own multi-process LocalCluster (3 workers, 3 PS
tasks, PS 2 standing by, ``set_failover(EVERY)``, 8 by default, in every run, killed or not):
the demo's MLP on the bundled digits data (Adam 1e-3, batch 32 per worker, 4 epochs of 60
steps), accuracy on the test split. Seed ``s`` (initial weights and data order) serves both
an undisturbed and a killed run, so each pair differs only by the kill: PS 1 killed
(SIGKILL) once ``KILL_AT`` (3/8) of the fit's rounds (ASP: steps) are applied, the middle of
epoch 2, so the death is met by steps, not by Keras's own reads on the chief between two
epochs (docs/FAILOVER.md, Limits; the epoch-end kill is the chaos table's ``epoch`` kind).
Writes ``failover_accuracy.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from failover_chaos import LOCK, REPO, save  # noqa: E402 - beside this file
EPOCHS, STEPS, BATCH, WORKERS = 4, 60, 32, 3
KILL_AT = 3 / 8  # of the rounds: the middle of epoch 2 of 4


def child(strategy_name: str, seed: int, kill: bool, out: str, every: int = 8) -> None:
    """One fit (in this process); writes its accuracy and failover events to ``out``."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    import tf_hetero
    from tf_hetero import data, models
    from tf_hetero.strategies import registry

    tf.random.set_seed(seed)
    train, test = data.load("digits", "train"), data.load("digits", "test")
    data.device_datasets_without_autotune()
    with tf_hetero.LocalCluster(WORKERS, 3, processes=True) as cluster:
        strategy = registry.make(strategy_name, cluster.resolver, stall_timeout_s=120)
        strategy.scale_ps(2)  # PS 2 stands by
        strategy.set_failover(every or None)  # 0: off (an undisturbed control)
        with strategy.scope():
            model = models.build("mlp", input_shape=train.input_shape,
                                 num_classes=train.num_classes, seed=seed)
            model.compile(optimizer=keras.optimizers.Adam(1e-3),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        engine = strategy.engine
        rounds = EPOCHS * STEPS / registry.updates_per_round(strategy_name, WORKERS)

        failover = strategy.coordinator.failover

        def applied():  # rounds applied (ASP: steps; without failover, not counted)
            if engine is None:
                return failover.steps.run if failover is not None else -1
            return sum(r.applied > 0 for r in engine.rounds)

        def kill_later():
            deadline = time.monotonic() + 300
            while applied() < KILL_AT * rounds and time.monotonic() < deadline:
                time.sleep(0.05)
            cluster.kill("ps", 1)

        if kill:
            threading.Thread(target=kill_later, daemon=True).start()
        fn = data.dataset_fn(batch_size=BATCH, num_workers=WORKERS, seed=seed, data=train,
                             per_worker="reshuffle")
        t0 = time.perf_counter()
        model.fit(keras.utils.experimental.DatasetCreator(fn), epochs=EPOCHS,
                  steps_per_epoch=STEPS, verbose=0)
        wall = time.perf_counter() - t0
        logits = model(test.x, training=False).numpy()
        result = dict(accuracy=float(np.mean(np.argmax(logits, axis=1) == test.y)),
                      iterations=int(model.optimizer.iterations.numpy()), applied=applied(),
                      events=failover.events if failover is not None else [], fit_s=wall)
    with open(out, "w") as f:
        json.dump(result, f)


def run(strategy: str, seed: int, kill: bool, timeout: float, log: str, every: int = 8) -> dict:
    out = tempfile.mktemp(suffix=".json")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    cmd = ["flock", LOCK, "timeout", "-k", "10", str(timeout), sys.executable, __file__,
           "--child", strategy, str(seed), "kill" if kill else "none", out, str(every)]
    with open(log, "w") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0 or not os.path.exists(out):
        return dict(error=f"exit {proc.returncode} (log: {log})")
    with open(out) as f:
        r = json.load(f)
    os.remove(out)
    return r


def table(rows: list[dict]) -> str:
    lines = ["| strategy | undisturbed accuracy, mean [min-max] | killed accuracy, mean "
             "[min-max] | killed - undisturbed, per seed | failovers | rounds rolled back |",
             "|---|---|---|---|---:|---:|"]
    for s in dict.fromkeys(r["strategy"] for r in rows):
        pairs = {}
        for r in rows:
            if r["strategy"] == s and "accuracy" in r:
                pairs.setdefault(r["seed"], {})[r["kill"]] = r
        base = [p[False]["accuracy"] for p in pairs.values() if False in p]
        hit = [p[True]["accuracy"] for p in pairs.values() if True in p]
        diffs = [p[True]["accuracy"] - p[False]["accuracy"] for p in pairs.values()
                 if len(p) == 2]
        events = [e for p in pairs.values() if True in p for e in p[True]["events"]]

        def span(v):
            return (f"{statistics.mean(v):.4f} [{min(v):.4f}-{max(v):.4f}]" if v else "-")

        lines.append(f"| {s} | {span(base)} | {span(hit)} | "
                     f"{', '.join(f'{d:+.4f}' for d in diffs)} | {len(events)} | "
                     f"{', '.join(str(e['rolled_back']) for e in events)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--strategies", default="bsp,hps")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=1, help="seeds first-seed, +1, ...")
    p.add_argument("--every", type=int, default=8,
                   help="set_failover(EVERY) in every run; 0: failover off")
    p.add_argument("--timeout", type=float, default=300)
    a = p.parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    rows = []
    # Seeds from 1: with tf.random.set_seed(0), TF's get_seed compares the per-worker
    # shuffle seed (a tensor) with 0 in Python and the dataset function fails to trace.
    for seed in range(max(1, a.first_seed), max(1, a.first_seed) + a.repeats):
        for strategy in a.strategies.split(","):
            for kill in (False, True):
                log = os.path.join(a.out_dir, f"{strategy}-{seed}-{'kill' if kill else 'none'}.log")
                r = run(strategy, seed, kill, a.timeout, log, a.every)
                r.update(strategy=strategy, seed=seed, kill=kill)
                rows.append(r)
                print(f"{strategy} seed={seed} kill={kill}: "
                      f"{r.get('accuracy', r.get('error'))}", flush=True)
                save(os.path.join(a.out_dir, "failover_accuracy"), rows, table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "kill", sys.argv[5],
              int(sys.argv[6]))
        sys.stdout.flush()
        os._exit(0)  # skip TF teardown against a killed server
    sys.exit(main())
