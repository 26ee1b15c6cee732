"""The carriers (strategies/runtime/carriers.py) against closures on a multi-process cluster
of N workers and 1 PS, each process role's CPU per round beside the round. LIGHT=1: the step
only sleeps SLEEP_US (no model), so what a round costs beyond it is the launch's own.
BUFFERED=1: each round releases two tokens per lane, the second while the carriers are busy.
VARIANT=variant_pack (or variant_exchange): that module's carrier timed beside the library's.
PS=2: two PS tasks (the lanes' queues spread over them; ONE_PS=1: all on PS 0).
    LIGHT=1 MP=1 .venv/bin/python probe.py N ROUNDS SLEEP_US
(PYTHONPATH=the repository's root). Frozen at the commit of this folder's README (a copy of
../2026-12-07-carriers/probe.py with the role CPU, LIGHT and BUFFERED)."""
import os, sys, time, json
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
N, R, SLEEP_US = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
import numpy as np
import tensorflow as tf
import tf_keras as keras
import tf_hetero
from tf_hetero.emulation.sleep import sleep_op
from tf_hetero.strategies.runtime.carriers import Carriers
PS = int(os.environ.get("PS", "1"))
c = tf_hetero.LocalCluster(N, PS, processes=os.environ.get("MP") == "1").start()
strategy = tf.distribute.ParameterServerStrategy(c.resolver)
coord = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(64, activation="relu", input_shape=(40,)),
                              keras.layers.Dense(10)])
    accs = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]

def dataset_fn():
    x = np.random.default_rng(0).normal(size=(512, 40)).astype("float32")
    y = np.arange(512) % 10
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
it = iter(coord.create_per_worker_dataset(dataset_fn))
loss_fn = lambda y, z: tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(y, tf.int32), z))

LIGHT = os.environ.get("LIGHT") == "1"

def body(iterator):
    x, y = next(iterator)
    if LIGHT:  # no model: the step only sleeps (no CPU beside the release's own)
        return tf.cast(sleep_op(tf.constant(SLEEP_US, tf.int64)), tf.float32) * 0 + tf.reduce_mean(x)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    if SLEEP_US:
        grads = [g + tf.cast(sleep_op(tf.constant(SLEEP_US, tf.int64)), g.dtype) * 0 for g in grads]
    pushed = [a.assign_add(g) for a, g in zip(accs, grads)]
    with tf.control_dependencies(pushed):
        return tf.identity(loss)

@tf.function
def token_step(token, iterator):
    return body(iterator)

@tf.function
def plain_step(iterator):
    return body(iterator)

@tf.function
def apply(lr):
    for v, a in zip(model.trainable_variables, accs):
        v.assign_sub(lr * a.read_value() / N)
        a.assign(tf.zeros_like(a))

VARIANT = os.environ.get("VARIANT")
if VARIANT:
    import importlib
    mod = importlib.import_module(VARIANT)
    Variant = getattr(mod, "Xchg", None) or mod.Pack


ONE_PS = os.environ.get("ONE_PS") == "1"  # every queue on PS 0 (as before 2026-12-08)
PER_PS = []


def token_rounds(rounds, cls=Carriers):
    """Carriers made and started (traced) once per call, as once per fit; two rounds run
    before the timed ones, as closure_rounds' functions are traced by the warm-up."""
    car = cls(coord, token_step, (it,), workers=range(N), output_signature=tf.TensorSpec([], tf.float32),
              ps_devices=["/job:ps/replica:0/task:0"] if ONE_PS else None)
    car.start()
    def run(k, r0):
        for r in range(r0, r0 + k):
            if os.environ.get("BUFFERED") == "1":  # the next token waits in the queue
                car._release_for(tuple(range(N)))(tf.constant(np.full(N, r, np.int64)))
                car._out[:] += 1
                time.sleep(0.005)
                a = _clock()
                car._release_for(tuple(range(N)))(tf.constant(np.full(N, r, np.int64)))
                car._out[:] += 1
                b = _clock()
                car.collect(N, timeout_s=120)
                car.collect(N, timeout_s=120)
                c = _clock(); apply(tf.constant(0.01)); d = _clock()
                PARTS.append([(b[0]-a[0])*1e3, (b[1]-a[1])*1e3, (c[0]-b[0])*1e3, (c[1]-b[1])*1e3, (d[0]-c[0])*1e3, (d[1]-c[1])*1e3])
                continue
            a = _clock()
            car.release({lane: r for lane in range(N)})
            b = _clock()
            car.collect(N, timeout_s=120)
            c = _clock()
            apply(tf.constant(0.01))
            d = _clock()
            PARTS.append([(b[0]-a[0])*1e3, (b[1]-a[1])*1e3, (c[0]-b[0])*1e3, (c[1]-b[1])*1e3, (d[0]-c[0])*1e3, (d[1]-c[1])*1e3])
    run(2, 0)
    t = _clock()
    m0 = METER.snapshot()
    run(rounds, 2)
    cpu = METER.since(m0)
    m1 = METER.snapshot()["ticks"]
    PER_PS.append(sorted(round((m1[p] - m0["ticks"][p]) / os.sysconf("SC_CLK_TCK") / rounds * 1e3, 2)
                         for p, role in METER.roles.items() if role == "ps"))
    t = _since(t, rounds)
    ROLE.append({k: round(v / rounds * 1e3, 2) for k, v in cpu["cpu_s"].items()} | {"busy": cpu["machine_busy"]})
    steps = car.stop(timeout_s=120)
    assert steps.tolist() == [(rounds + 2) * (2 if os.environ.get('BUFFERED') == '1' else 1)] * N, steps
    return t

def closure_rounds(rounds):
    m0 = METER.snapshot()
    _closure_rounds(rounds)
    cpu = METER.since(m0)
    CROLE.append({k: round(v / rounds * 1e3, 2) for k, v in cpu["cpu_s"].items()} | {"busy": cpu["machine_busy"]})

def _closure_rounds(rounds):
    for r in range(rounds):
        for _ in range(N):
            coord.schedule(plain_step, args=(it,))
        coord.join()
        apply(tf.constant(0.01))

def _clock():
    return time.perf_counter(), time.process_time()

def _since(t, rounds):
    return (round((time.perf_counter() - t[0]) / rounds * 1e3, 2),
            round((time.process_time() - t[1]) / rounds * 1e3, 2))

def timed(fn, rounds):
    t = _clock()
    out = fn(rounds)
    return out if out is not None else _since(t, rounds)

PARTS = []
from tf_hetero.telemetry.cpu import CpuMeter
METER = CpuMeter.for_cluster(c)
ROLE = []
res = {"N": N, "sleep_ms": SLEEP_US / 1e3}
CROLE = []
print("warm", timed(token_rounds, 3),
      timed(lambda r: token_rounds(r, Variant), 3) if VARIANT else "",
      timed(closure_rounds, 3), flush=True)
for k in range(2):
    res[f"tokens{k}"] = timed(token_rounds, R)
    if VARIANT:
        res[f"variant{k}"] = timed(lambda r: token_rounds(r, Variant), R)
    res[f"closures{k}"] = timed(closure_rounds, R)
res["role_cpu_ms_per_round"] = ROLE
res["each_ps_cpu_ms_per_round"] = PER_PS
res["closures_role_cpu_ms_per_round"] = CROLE
res["parts_release_collect_apply_wall_cpu_ms"] = [round(float(x), 2) for x in np.median(np.array(PARTS), 0)]
print(json.dumps(res), flush=True)
os._exit(0)
