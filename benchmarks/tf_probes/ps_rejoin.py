"""Can a PS task that died and was failed over come back into the same running cluster, so
a later failover may use it (issue 51: "a restarted PS task rejoins the standby pool")?

Stock PSS, 2 workers and 3 PS tasks in separate processes; ``v0`` on PS 0, ``v1`` on PS 1.
PS 1 is killed and ``v1`` created again on PS 2 from a copy (as ps_failover.py); PS 1's
process is started again on its address; the chief then runs one op on PS 1 as it is,
updates its eager context with the same server def (``context.update_server_def``, what
TF's worker preemption handler does when a worker comes back), runs the op again, creates
``v1`` once more on PS 1 and runs a step traced after that on the workers.

    .venv/bin/python benchmarks/tf_probes/ps_rejoin.py     # PROBE_IDLE=1: PS 1 left unused

Then PS 0 is killed too, and PS 1 is used again (an op, a variable created there).

Measured 2026-12-04 (tensorflow-cpu 2.21, 2 cores): the restarted process listens after
2.4-2.6 s; an op on it before the update fails (``UnavailableError``, connection refused);
``update_server_def`` with the same server def takes 0.3-0.5 s, after which ops on the
restarted PS 1 and on PS 0 and 2 run, ``v1`` created on PS 1 is read and written by the
workers' steps, and after PS 0 dies too an op and a new variable on PS 1 still work (with
or without PS 1 used in between). Carried into the failover (``Failover.rejoin``, at an
epoch's end). A first try inside a fit failed with "Connection refused" naming the restarted
PS 1: the harness's, not TF's doing (``PR_SET_PDEATHSIG`` is per thread, and the thread that
restarted the server had ended; docs/TF_INTERNALS.md).
"""
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from tensorflow.python.eager import context  # noqa: E402

import tf_hetero  # noqa: E402
from tf_hetero.tfcompat import variables as tfvars  # noqa: E402

out = {}
PS = "/job:ps/replica:0/task:{}/device:CPU:0"


def attempt(key, fn):
    t0 = time.monotonic()
    try:
        out[key] = fn()
    except Exception as e:  # noqa: BLE001 - the probe reports what TF raised
        out[key] = f"{type(e).__name__}: {str(e)[:300]}"
    out[key + "_s"] = round(time.monotonic() - t0, 3)


def move(v, ps, value):
    old = tfvars.inner_variable(v)
    with tf.init_scope(), tf.device(PS.format(ps)):
        new = tfvars.resource_variable(value, like=old)
    tfvars.swap_inner(v, new)


def op_on(ps):
    with tf.device(PS.format(ps)):
        return int(tf.add(1, 1).numpy())


with tf_hetero.LocalCluster(2, 3, processes=True) as cluster:
    strategy = tf.distribute.ParameterServerStrategy(cluster.resolver)
    coord = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        v0 = tf.Variable(1.0, name="v0")
        v1 = tf.Variable(2.0, name="v1")
    out["devices"] = [v0.device, v1.device]

    def run_steps(n):
        @tf.function
        def step():
            v0.assign_add(1.0)
            v1.assign_add(1.0)
            return v0 + v1
        for _ in range(n):
            coord.schedule(step)
        coord.join()
        return [float(v0.numpy()), float(v1.numpy()), v1.device]

    attempt("before", lambda: run_steps(2))
    copy = float(v1.numpy())
    cluster.kill("ps", 1)
    move(v1, 2, copy)
    attempt("failed_over", lambda: run_steps(2))
    t0 = time.monotonic()
    cluster.restart("ps", 1)
    out["restart_s"] = round(time.monotonic() - t0, 2)
    attempt("op_on_restarted", lambda: op_on(1))
    attempt("update_server_def",
            lambda: context.context().update_server_def(context.context().get_server_def())
            or "ok")
    attempt("op_after_update", lambda: op_on(1))
    attempt("ops_on_others_after_update", lambda: [op_on(0), op_on(2)])
    if os.environ.get("PROBE_IDLE"):
        attempt("steps_before_kill", lambda: run_steps(4))
    else:
        attempt("move_back", lambda: move(v1, 1, float(v1.numpy())) or v1.device)
        attempt("steps_after_move_back", lambda: run_steps(2))
    cluster.kill("ps", 0)  # a second death after the rejoin
    attempt("op_on_rejoined_after_ps0_died", lambda: op_on(1))
    attempt("create_on_rejoined_after_ps0_died",
            lambda: move(v0, 1, 10.0) or v0.device)
    attempt("op_on_rejoined_later", lambda: (time.sleep(1.0), op_on(1))[1])
print(json.dumps(out, indent=1))
