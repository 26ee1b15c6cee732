"""Two workers sharing one emulated PS (stock PSS, profile ps_mbps): throughput, task times,
PS busy and wait seconds (docs/PSLD.md).

    flock /tmp/tf-hetero-heavy.lock .venv/bin/python benchmarks/psld_shared_ps.py 1 1 "base_ms=20;ps_mbps=1.38"
    flock /tmp/tf-hetero-heavy.lock .venv/bin/python benchmarks/psld_shared_ps.py 2 1 "base_ms=20;ps_mbps=1.38"

Arguments: workers, PS tasks, profile. 10 warm-up steps, then 40 measured."""
import os, sys, time, statistics
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf, tf_keras as keras, tf_hetero
from tf_hetero.telemetry.tasklog import TaskLog
workers = int(sys.argv[1]); nps = int(sys.argv[2]); profile = sys.argv[3]
cl = tf_hetero.LocalCluster(workers, nps, processes=True).start()
strategy = tf.distribute.ParameterServerStrategy(cl.resolver)
train = tf_hetero.data.load("digits", "train")
with strategy.scope():
    model = tf_hetero.models.mlp(input_shape=train.input_shape)
    model.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
dev = tf_hetero.emulate(model, profile, strategy=strategy)
log = TaskLog.for_strategy(strategy)
fn = tf_hetero.data.dataset_fn(batch_size=16, num_workers=workers, data=train)
model.fit(keras.utils.experimental.DatasetCreator(fn), epochs=1, steps_per_epoch=10, verbose=0)  # warm-up
n0 = len(log.records); before = dev.servers.totals() if dev.servers else None
t = time.perf_counter()
model.fit(keras.utils.experimental.DatasetCreator(fn), epochs=1, steps_per_epoch=40, verbose=0)
wall = time.perf_counter() - t
recs = log.records[n0:]
d = [1e3 * r.duration for r in recs]
print(f"RESULT workers={workers} ps={nps} profile={profile!r} tasks={len(recs)} wall={wall:.2f}s "
      f"tasks/s={len(recs)/wall:.2f} median_task_ms={statistics.median(d):.0f}")
if dev.servers:
    after = dev.servers.totals()
    print("RESULT per-step read bytes", dev.servers.read_bytes, "push", dev.servers.push_bytes)
    for k in after:
        print("RESULT", k, [round(a - b, 3) for a, b in zip(after[k], before[k])])
cl.stop(); os._exit(0)
