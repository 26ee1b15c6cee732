"""Where a live-rebalancing decision's time goes (docs/decisions/0008-rebalancing-controller.md;
its figures in benchmarks/results/2026-11-25-psld-first-runs/): one in-process BSP fit of 40
rounds (4 workers, 2 PS, profile base_ms=30;ps_mbps=4;ps_slow=1:3, the MLP on digits),
rebalance=RebalanceConfig(window=WINDOW). Prints each boundary wait (the tasks pending when
it started, the rounds applied inside it), the rates the controller estimated at each decision,
every round's open/applied time, the moves, and when rounds 27 and 40 were applied.

    flock /tmp/tf-hetero-heavy.lock .venv/bin/python benchmarks/psld_rebalance_probe.py 8
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tf_keras as keras  # noqa: E402

import tf_hetero  # noqa: E402
from tf_hetero.policies.ps_rates import RateEstimator  # noqa: E402
from tf_hetero.policies.rebalance_config import RebalanceConfig  # noqa: E402
from tf_hetero.strategies.runtime import rebalance as runtime  # noqa: E402

WINDOW = int(sys.argv[1]) if len(sys.argv) > 1 else 8
W = 4
cluster = tf_hetero.LocalCluster(W, 2, profile="base_ms=30;ps_mbps=4;ps_slow=1:3",
                                 processes=False).start()
train = tf_hetero.data.load("digits", "train")
data = keras.utils.experimental.DatasetCreator(
    tf_hetero.data.dataset_fn(batch_size=32, num_workers=W, data=train))
waits, rates = [], []
at_boundary = runtime.Rebalancer.at_boundary


def logged_at_boundary(self, timeout=600.0):
    engine = self.engine
    with engine._lock:  # pylint: disable=protected-access
        pending = len(engine._pending)  # pylint: disable=protected-access
    t0 = engine.clock()
    out = at_boundary(self, timeout)
    waits.append((t0, engine.clock(), pending, out, self.tasks))
    return out


measured_rates = RateEstimator.measure


def logged_rates(self, busy, served, requests=None):
    out = measured_rates(self, busy, served, requests)
    rates.append((busy, served, requests, out))
    return out


runtime.Rebalancer.at_boundary = logged_at_boundary
RateEstimator.measure = logged_rates
strategy = tf_hetero.BSPStrategy(cluster.resolver, rebalance=RebalanceConfig(window=WINDOW))
with strategy.scope():
    model = tf_hetero.models.mlp(input_shape=train.input_shape)
    model.compile(keras.optimizers.SGD(0.08, momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
tf_hetero.emulate(model, cluster.profile, strategy=strategy)
model.fit(data, epochs=1, steps_per_epoch=W * 40, verbose=0)
rounds = [r for r in strategy.monitor.rounds if r.training]
t0 = rounds[0].t_open
for a, b, pending, out, tasks in waits:
    inside = [r for r in rounds if a <= r.t_applied <= b]
    print(f"wait {a - t0:6.2f}-{b - t0:6.2f} s ({b - a:.2f} s), {pending} tasks pending, "
          f"boundary {out}, at task {tasks}: {len(inside)} rounds applied inside")
for busy, served, requests, out in rates:
    print(f"rates: busy {busy} bytes {served} requests {requests} -> {out}")
print("rounds (open/applied s):", " ".join(f"{r.t_open - t0:.2f}/{r.t_applied - t0:.2f}"
                                           for r in rounds))
print("moves:", [m[:4] for m in strategy.rebalancer.moves])
print(f"window {WINDOW}: round 27 applied at {rounds[26].t_applied - t0:.2f} s, round 40 at "
      f"{rounds[39].t_applied - t0:.2f} s")
cluster.stop()
os._exit(0)
