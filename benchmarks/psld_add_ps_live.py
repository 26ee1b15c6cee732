"""Evidence for docs/PSLD.md section 5 (why elastic PS uses a standby pool).

    flock /tmp/tf-hetero-heavy.lock .venv/bin/python benchmarks/psld_add_ps_live.py

Can a running PSS cluster take a PS task it did not list? Chief knows 2 workers + 1 PS;
a 2nd PS server is started later with a cluster spec naming all; the chief updates its
server_def (context.update_server_def) and uses /job:ps/task:1 from the chief and from a
worker function, then a PSS fit with a variable moved there."""
import json, os, socket, subprocess, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

def port():
    s = socket.socket(); s.bind(("localhost", 0)); p = s.getsockname()[1]; s.close(); return p

W = [f"localhost:{port()}" for _ in range(2)]; P = [f"localhost:{port()}" for _ in range(2)]
C1 = {"worker": W, "ps": P[:1]}; C2 = {"worker": W, "ps": P}
CHIEF = f"localhost:{port()}"
SERVE = ("import sys,json,tensorflow as tf;c=json.loads(sys.argv[1]);"
         "s=tf.distribute.Server(tf.train.ClusterSpec(c),job_name=sys.argv[2],task_index=int(sys.argv[3]),protocol='grpc',start=True);s.join()")
procs = [subprocess.Popen([sys.executable, "-c", SERVE, json.dumps(C1), "worker", str(i)]) for i in range(2)]
procs.append(subprocess.Popen([sys.executable, "-c", SERVE, json.dumps(C1), "ps", "0"]))
try:
    import numpy as np, tensorflow as tf, tf_keras as keras
    from tensorflow.python.eager import context
    from tensorflow.python.ops.resource_variable_ops import ResourceVariable
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({**C1, "chief": [CHIEF]}), task_type="chief", task_id=0, rpc_layer="grpc")
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(4, input_shape=(5,)), keras.layers.Dense(3)])
        model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.rand(64, 5).astype("float32"); y = np.random.randint(0, 3, 64)
    dc = keras.utils.experimental.DatasetCreator(lambda ctx: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8))
    model.fit(dc, epochs=1, steps_per_epoch=4, verbose=0); print("STEP fit on 1 PS ok", flush=True)
    procs.append(subprocess.Popen([sys.executable, "-c", SERVE, json.dumps({**C2, "chief": [CHIEF]}), "ps", "1"]))
    time.sleep(3)
    sd = context.get_server_def()
    job = [j for j in sd.cluster.job if j.name == "ps"][0]
    job.tasks[1] = P[1]
    t0 = time.time()
    try:
        context.context().update_server_def(sd)
        print(f"STEP update_server_def ok ({time.time()-t0:.2f}s); devices:",
              [d.name for d in tf.config.list_logical_devices() if "ps" in d.name], flush=True)
    except Exception as e:
        print("STEP update_server_def failed:", type(e).__name__, str(e)[:400], flush=True); raise SystemExit
    try:
        print("STEP old variable still readable:", model.layers[0].kernel.numpy().sum(), flush=True)
    except Exception as e:
        print("STEP old variable read failed:", type(e).__name__, str(e)[:300], flush=True)
    with tf.device("/job:ps/replica:0/task:1/device:CPU:0"):
        v = ResourceVariable(tf.ones([3]))
    print("STEP variable on ps:1 from chief:", v.device, v.numpy(), flush=True)
    @tf.function
    def f():
        return v.read_value() * 2.0
    try:
        with tf.device("/job:worker/replica:0/task:0/device:CPU:0"):
            print("STEP worker function reads ps:1:", f().numpy(), flush=True)
    except Exception as e:
        print("STEP worker read failed:", type(e).__name__, str(e)[:400], flush=True)
    try:
        model.fit(dc, epochs=1, steps_per_epoch=4, verbose=0); print("STEP fit after update ok", flush=True)
    except Exception as e:
        print("STEP fit after update failed:", type(e).__name__, str(e)[:400], flush=True)
    # Move a kernel's inner variable to ps:1, as tf-hetero's rebalancer does, and fit again.
    w = model.layers[0].kernel
    old = w._v
    with tf.device("/job:ps/replica:0/task:1/device:CPU:0"):
        new = ResourceVariable(old.read_value(), name="moved", distribute_strategy=old._distribute_strategy)
    w._unique_id = old._unique_id; w._v = new; w._cache = None
    model.train_function = None
    try:
        model.fit(dc, epochs=1, steps_per_epoch=4, verbose=0)
        print("STEP fit with a kernel on the new ps:1 ok; kernel on", w.device, flush=True)
    except Exception as e:
        print("STEP fit with moved kernel failed:", type(e).__name__, str(e)[:600], flush=True)
finally:
    for p in procs: p.kill()
    os._exit(0)
