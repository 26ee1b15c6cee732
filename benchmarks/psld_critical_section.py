"""Does a tf.CriticalSection on a PS serialize steps from different workers? (docs/PSLD.md)

    flock /tmp/tf-hetero-heavy.lock .venv/bin/python benchmarks/psld_critical_section.py cs proc
    flock /tmp/tf-hetero-heavy.lock .venv/bin/python benchmarks/psld_critical_section.py nocs proc

2 workers, 1 PS; each scheduled closure sleeps 300 ms on the PS, inside the PS's critical
section (``cs``) or not (``nocs``); 4 closures per repeat. Serialized: ~1.2 s wall and task
times of ~300/600/600/600 ms; parallel: ~0.6 s and ~300 ms each. ``inproc`` instead of
``proc`` runs the servers in this process.
"""
import os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
import tf_hetero
from tf_hetero.emulation.device import sleep_op
mode = sys.argv[1] if len(sys.argv) > 1 else "cs"
procs = (sys.argv[2] == "proc") if len(sys.argv) > 2 else True
cl = tf_hetero.LocalCluster(2, 1, processes=procs).start()
strategy = tf.distribute.ParameterServerStrategy(cl.resolver)
coord = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
ps = "/job:ps/replica:0/task:0"
with tf.device(ps):
    cs = tf.CriticalSection(name="ps0_server")
print("mutex device", cs._handle.device)
with strategy.scope():
    v = tf.Variable(1.0)

@tf.function
def step():
    t0 = tf.timestamp()
    def body():
        with tf.device(ps):
            s = sleep_op(tf.constant(300000, tf.int64))
            with tf.control_dependencies([s]):
                return tf.identity(tf.timestamp())
    if mode == "cs":
        with tf.device(ps):
            t_end = cs.execute(body)
    else:
        t_end = body()
    return tf.stack([t0, tf.timestamp(), tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(), tf.float64)])

for rep in range(3):
    t = time.time()
    rvs = [coord.schedule(step) for _ in range(4)]
    coord.join()
    print(mode, "wall for 4 tasks on 2 workers:", round(time.time() - t, 3))
    for r in rvs:
        a = r.fetch(); print("  worker", int(a[2]), "task ms", round((a[1]-a[0])*1e3), "start", round(a[0] % 100, 3))
cl.stop()
os._exit(0)
