"""Elastic PS scale-out 1 -> 2 in the middle of a BSP fit (issue 14 item 5 target; figures
in docs/PSLD.md section 5). One multi-process LocalCluster with 2 PS tasks listed, PS 1
standing by at the start (``scale_ps(1)``); the emulated PS tasks serve the bytes of every
read and push (profile ``ps_mbps``), so one PS is the bottleneck. Per repeat, three fits in
the same process, each on a fresh model:

- ``scale``: 1 PS for epoch 1, ``scale_ps(2)`` from a callback at its end, epoch 2 on 2 PS;
- ``1ps``: 1 PS throughout (``scale_ps(1)``, no scaling);
- ``2ps``: both PS from the start (round-robin).

Figures (engine rounds, ``t_applied - t_open``; the first 2 rounds of each epoch left out):
throughput of epoch 1 and epoch 2 (samples / second over the rounds), mean round ms, and
the *epoch-boundary gap* of every run: the time from the last round applied in epoch 1 to
the first applied in epoch 2, minus the median round of epoch 2. Fit's own epoch change
costs some of it in every run; the *pause caused by the scaling* (moves, re-trace, the
workers instantiating the new step) is the scale run's gap minus the 1ps run's. Also the
rebalancer's own figures (boundary wait, move seconds).

    flock /tmp/tf-hetero-heavy.lock .venv/bin/python benchmarks/psld_scale_out.py \\
        --profile "base_ms=30;ps_mbps=2" --repeats 3 --json runs/psld/scale_out.json
"""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--profile", default="base_ms=30;ps_mbps=2")
    p.add_argument("--steps-per-epoch", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args()

    import tf_keras as keras

    import tf_hetero
    from tf_hetero.policies.placement import ps_index
    from tf_hetero.policies.rebalance_config import RebalanceConfig
    from tf_hetero.telemetry.perf import round_breakdown

    train = tf_hetero.data.load("digits", "train")
    data = keras.utils.experimental.DatasetCreator(tf_hetero.data.dataset_fn(
        batch_size=a.batch_size, num_workers=a.workers, data=train))
    n = a.workers
    cluster = tf_hetero.LocalCluster(n, 2, profile=a.profile, processes=True).start()

    def build(kind):
        # A controller that never decides within the run: only the scaling moves anything.
        strategy = tf_hetero.BSPStrategy(cluster.resolver,
                                         rebalance=RebalanceConfig(window=10**6))
        if kind in ("scale", "1ps"):
            strategy.scale_ps(1)
        with strategy.scope():
            model = tf_hetero.models.mlp(input_shape=train.input_shape)
            model.compile(keras.optimizers.SGD(0.02 * n, momentum=0.9),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        tf_hetero.emulate(model, cluster.profile, strategy=strategy)
        return strategy, model

    def run(kind):
        strategy, model = build(kind)
        marks = []
        servers = model._tf_hetero_device.servers  # pylint: disable=protected-access
        loads = [servers.totals()]

        class Scale(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                marks.append(strategy.engine.clock())
                loads.append(servers.totals())
                if kind == "scale" and epoch == 0:
                    strategy.scale_ps(2)

        model.fit(data, epochs=2, steps_per_epoch=a.steps_per_epoch, verbose=0,
                  callbacks=[Scale()])
        rounds = [r for r in strategy.monitor.rounds if r.training]
        epochs = [[r for r in rounds if r.t_applied <= marks[0]],
                  [r for r in rounds if r.t_open > marks[0]]]
        out = {"kind": kind, "ps_at_end": sorted({ps_index(v.device)
                                                 for v in model.trainable_variables})}
        engine_rounds = [[r for r in strategy.engine.rounds if r.t_applied and r.t_applied <= marks[0]],
                         [r for r in strategy.engine.rounds if r.t_open > marks[0]]]
        for e, rs in enumerate(epochs, 1):
            steady = rs[2:]
            out[f"epoch{e}_breakdown_ms"] = round_breakdown(engine_rounds[e - 1][2:])
            span = steady[-1].t_applied - steady[0].t_applied
            out[f"epoch{e}_samples_per_s"] = (len(steady) - 1) * n * a.batch_size / span
            out[f"epoch{e}_round_ms"] = 1e3 * statistics.mean(
                r.t_applied - r.t_open for r in steady)
            # Where a round's time goes on each PS (whole epoch, from the PS counters):
            # service of the bytes at the profile's rate, the rest of the busy time (the
            # emulation's fixed cost per request), and idle.
            d = {k: [b - a for a, b in zip(loads[e - 1][k], loads[e][k])] for k in loads[0]}
            per = 1e3 / len(rs)
            out[f"epoch{e}_ps"] = [{
                "busy_ms_per_round": d["busy_s"][p] * per,
                "bytes_ms_per_round": d["bytes"][p] * servers.us_per_byte[p] / 1e3 / len(rs),
                "requests_per_round": d["requests"][p] / len(rs),
                "wait_ms_per_round": d["wait_s"][p] * per,
            } for p in range(servers.num_ps)]
        # The gap at the epoch boundary, in every run: fit's own epoch change costs some too.
        before, after = epochs[0][-1], epochs[1][0]
        median_after = statistics.median(r.t_applied - r.t_open for r in epochs[1][2:])
        out["gap_s"] = after.t_applied - before.t_applied - median_after
        # Where the boundary's time goes: epoch end (the callback) -> the first round of
        # epoch 2 opened, its tasks picked up and run, its close -> its update applied.
        first = engine_rounds[1][0]
        done = [t for t in first.tasks if t.t_end]
        out["boundary"] = {
            "to_open_s": first.t_open - marks[0],
            "dispatch_max_s": max(t.t_start - first.t_open for t in done),
            "task_max_s": max(t.t_end - t.t_start for t in done),
            "close_to_applied_s": first.t_applied - first.t_close,
            "last_applied_to_epoch_end_s": marks[0] - before.t_applied}
        if kind == "scale":
            (s,) = [x for x in strategy.rebalancer.scalings if x["active"] == [0, 1]]
            out["boundary_wait_s"], out["move_s"], out["moves"] = (
                s["waited_s"], s["move_s"], s["moves"])
            # The parts of the pause that are tracing on the chief: the step re-traced before
            # the first round could open, the apply traced (ahead, on its own thread).
            out["retrace_step_s"] = strategy.rebalancer.retrace_s[-1]
            out["apply_traces"] = list(strategy.coordinator.dispatcher.apply_traces)
        out["throughput_ratio"] = out["epoch2_samples_per_s"] / out["epoch1_samples_per_s"]
        strategy.shutdown()
        return out

    # Untimed warm-up: the first tf-hetero fit in a process pays a one-time start-up.
    warm, model = build("2ps")
    model.fit(data, epochs=1, steps_per_epoch=2 * n, verbose=0)
    warm.shutdown()
    results = []
    for rep in range(a.repeats):
        for kind in ("scale", "1ps", "2ps") if rep % 2 == 0 else ("2ps", "1ps", "scale"):
            t0 = time.perf_counter()
            r = run(kind)
            r["repeat"], r["wall_s"] = rep, time.perf_counter() - t0
            results.append(r)
            print(json.dumps(r), flush=True)
    table = ["| run | epoch 1 samples/s | epoch 2 samples/s | epoch 2 / epoch 1 | "
             "round ms (1 / 2) | epoch-boundary gap s | PS at the end |",
             "|---|---:|---:|---:|---|---|---|"]
    for kind in ("scale", "1ps", "2ps"):
        rs = [r for r in results if r["kind"] == kind]

        def med(key, rs=rs):
            values = sorted(r[key] for r in rs)
            return values[len(values) // 2], values[0], values[-1]

        e1, e2, ratio = med("epoch1_samples_per_s"), med("epoch2_samples_per_s"), \
            med("throughput_ratio")
        gap = med("gap_s")
        pause = f"{gap[0]:.2f} [{gap[1]:.2f}-{gap[2]:.2f}]"
        if kind == "scale":
            w, m = med("boundary_wait_s"), med("move_s")
            pause += f" (boundary wait {w[0]:.2f}, moves {m[0]:.3f})"
        table.append(
            f"| {kind} | {e1[0]:.0f} [{e1[1]:.0f}-{e1[2]:.0f}] | {e2[0]:.0f} [{e2[1]:.0f}-"
            f"{e2[2]:.0f}] | {ratio[0]:.2f} [{ratio[1]:.2f}-{ratio[2]:.2f}] | "
            f"{med('epoch1_round_ms')[0]:.0f} / {med('epoch2_round_ms')[0]:.0f} | {pause} | "
            f"{rs[0]['ps_at_end']} |")
    print(f"profile {a.profile!r}, {n} workers, BSP, {a.steps_per_epoch} steps per epoch, "
          f"median [min-max] of {a.repeats}")
    gaps = {k: statistics.median(r["gap_s"] for r in results if r["kind"] == k)
            for k in ("scale", "1ps", "2ps")}
    print(f"pause caused by the scaling: {gaps['scale'] - gaps['1ps']:.2f} s (the scale run's "
          f"epoch-boundary gap minus the 1ps run's)")
    for kind in ("scale", "1ps"):
        parts = {k: statistics.median(r["boundary"][k] for r in results if r["kind"] == kind)
                 for k in results[0]["boundary"]}
        print(f"{kind}: epoch boundary, medians (s): " + ", ".join(
            f"{k} {v:.2f}" for k, v in parts.items()))
    print("\n".join(table))
    if a.json:
        os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": results, "table": table}, f, indent=1)
    cluster.stop()
    os._exit(0)  # TF's threads of a process cluster's chief can keep the interpreter alive


if __name__ == "__main__":
    main()
