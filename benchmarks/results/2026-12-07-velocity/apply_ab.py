# Frozen at commit 781a3a4: run with git checkout 781a3a4, from the repo root:
#   flock /tmp/heavy.lock .venv/bin/python benchmarks/results/2026-12-07-velocity/apply_ab.py workers8 3 OUT
"""The round's apply with the velocity scaling in three forms, side by side on one cluster
(each repeat in a shuffled order): ``none`` (no velocity op: the apply before the change),
``cond`` (one ``tf.cond`` over every slot, scaling when the factor is below 1) and
``uncond`` (each slot times the factor, every round: the shipped form). H-PS rows (its
apply is the same function as AutoStrategy's), the round breakdown of each."""
import json
import os
import random
import sys

import tensorflow as tf

import tf_hetero  # noqa: F401
from tf_hetero.strategies.runtime import round_apply
from tf_hetero import tfcompat
from tf_hetero.emulation.profile import Profile
from tf_hetero.tools import bench
from tf_hetero.tools.benchrow import run_strategy
from tf_hetero.tools.scenarios import load_scenarios

SHIPPED = round_apply._damp


def _none(optimizer, variables, velocity):
    return None


def _cond(optimizer, variables, velocity):
    slots = [s for v in variables for s in tfcompat.variables.velocity_slots(optimizer, v)]
    if not slots:
        return None

    def scale():
        ops = [s.assign(s * tf.cast(velocity, s.dtype)) for s in slots]
        with tf.control_dependencies(ops):
            return tf.constant(True)

    return tf.cond(velocity < 1.0, scale, lambda: tf.constant(False))


FORMS = {"none": _none, "cond": _cond, "uncond": SHIPPED}


def main(scenario, repeats, out_dir):
    (sc,) = load_scenarios(scenario)
    cfg = sc.config(strategies=("hps",), repeats=repeats, out_dir=out_dir)
    profile = Profile.parse(cfg.profile)
    os.makedirs(out_dir, exist_ok=True)
    from tf_hetero.cluster.local import LocalCluster

    rows = []
    with LocalCluster(cfg.workers, cfg.ps, profile=profile, processes=True) as cluster:
        bench.warm_up(cluster, cfg, profile)
        for rep in range(repeats):
            order = list(FORMS)
            random.Random(cfg.seed + rep).shuffle(order)
            for form in order:
                round_apply._damp = FORMS[form]
                run = run_strategy("hps", cluster, cfg, profile, seed=cfg.seed + rep)
                b = run.get("round_breakdown_ms") or {}
                rows.append({"form": form, "repeat": rep, "samples_per_sec": run["samples_per_sec"],
                             "mean_round_ms": run["mean_round_ms"], "breakdown": b,
                             "time_to_target_s": run["time_to_target_s"]})
                print(form, rep, round(run["samples_per_sec"]), run["mean_round_ms"], b, flush=True)
    round_apply._damp = SHIPPED
    with open(os.path.join(out_dir, "apply_ab.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
