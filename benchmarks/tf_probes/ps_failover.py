"""Can a ParameterServerStrategy cluster go on after a PS process dies, with the dead task's
variables created again on a standby PS and swapped into their wrappers (issue 51,
docs/decisions/0016-ps-failover.md)?

Stock PSS, 2 workers and 3 PS tasks in separate processes; ``v0`` on PS 0, ``v1`` on PS 1,
PS 2 standing by. Four steps run, the values are copied to the chief, PS 1 is killed, two
more steps fail; ``v1`` is created again on PS 2 from the copy (``tfvars.resource_variable``,
``tfvars.swap_inner``: the wrapper kept, as a rebalancing move does); the step traced before
the swap is scheduled again, then a step traced after it.

    .venv/bin/python benchmarks/tf_probes/ps_failover.py

Measured 2026-12-03 (tensorflow-cpu 2.21, 2 cores): the steps after the kill fail with
``UnavailableError`` naming ``/job:ps/replica:0/task:1`` within 10-17 ms (TF retries a
closure it deems transiently failed first: one of the two failed steps had already added to
``v0`` on the surviving PS 0, so survivors must be rolled back to the copy too); the
re-creation takes 4-5 ms; the step traced *before* the swap still fails on the dead PS
(its captured inputs hold the old inner variable; it wrote ``v0`` first); a step traced
after it runs on the same coordinator and workers (``v1`` = copy + 4), 30-46 ms for 4
steps.
"""
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import tf_hetero  # noqa: E402
from tf_hetero.tfcompat import variables as tfvars  # noqa: E402

out = {}


def values(*variables) -> list:
    return [float(v.numpy()) for v in variables]


def attempt(key, coord, step, n, *variables):
    """Schedules ``step`` ``n`` times and joins: ``out[key]`` the values after, or the error;
    ``out[key + "_s"]`` the seconds it took."""
    t0 = time.monotonic()
    try:
        for _ in range(n):
            coord.schedule(step)
        coord.join()
        out[key] = values(*variables)
    except Exception as e:  # noqa: BLE001 - the probe reports what TF raised
        out[key] = f"{type(e).__name__}: {str(e)[:300]}"
    out[key + "_s"] = time.monotonic() - t0


with tf_hetero.LocalCluster(2, 3, processes=True) as cluster:
    strategy = tf.distribute.ParameterServerStrategy(cluster.resolver)
    coord = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        v0 = tf.Variable(1.0, name="v0")
        v1 = tf.Variable(2.0, name="v1")
    out["devices"] = [v0.device, v1.device]

    def make():
        @tf.function
        def step():
            v0.assign_add(1.0)
            v1.assign_add(1.0)
            return v0 + v1
        return step

    step = make()
    attempt("before", coord, step, 4, v0, v1)
    copy = {"v0": v0.numpy(), "v1": v1.numpy()}
    victim = 1 if "task:1" in v1.device else 0
    cluster.kill("ps", victim)
    time.sleep(0.5)
    attempt("after_kill", coord, step, 2, v0, v1)
    # The dead PS's variables created again on PS 2 from the copy.
    t0 = time.monotonic()
    for v in (v0, v1):
        if f"task:{victim}" in v.device:
            old = tfvars.inner_variable(v)
            with tf.init_scope(), tf.device("/job:ps/replica:0/task:2/device:CPU:0"):
                new = tfvars.resource_variable(copy[v.name.split(":")[0]], like=old)
            tfvars.swap_inner(v, new)
    out["recreate_s"] = time.monotonic() - t0
    out["devices_after"] = [v0.device, v1.device]
    out["chief_read"] = values(v0, v1)
    attempt("old_trace_after_swap", coord, step, 2, v0, v1)
    attempt("new_trace_after_swap", coord, make(), 4, v0, v1)
print(json.dumps(out, indent=1))
