"""How long the emulation's sleep op really sleeps (docs/TF_INTERNALS.md section 9).

``tf_hetero.emulation.device.sleep_op`` is a one-element ``SleepDataset`` made and drained
inside the calling function (TensorFlow has no public sleep op). This probe times, inside a
``tf.function`` on the local CPU, the sleep with tf.data's default options (graph
optimizations and autotuning on, as ``sleep_op`` was built before 2026-11-28) beside
``sleep_op`` as shipped (both off), for a range of requested durations: mean measured ms over
``--calls`` calls (after one untimed call each).

    .venv/bin/python benchmarks/tf_probes/sleep_op.py

Measured 2026-11-28 (tensorflow-cpu 2.21, 2 cores, idle): defaults 3-5 ms over the request,
and 20 ms requests often sleeping ~40 ms (means 29-47 ms over 15 calls); shipped ~1 ms over
at every duration.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=15)
    p.add_argument("--us", default="0,1000,10000,19999,20000,20001,30000,100000")
    a = p.parse_args()

    import tensorflow as tf
    from tensorflow.python.data.experimental.ops import testing

    from tf_hetero.emulation.device import sleep_op

    def default_options_sleep(us):
        ds = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64))
        return next(iter(ds.apply(testing.sleep(tf.cast(us, tf.int64)))))

    def timed(sleep):
        @tf.function
        def f(us):
            t0 = tf.timestamp()
            with tf.control_dependencies([t0]):
                slept = sleep(us)
            with tf.control_dependencies([slept]):
                return tf.timestamp() - t0
        return f

    fns = {"tf.data defaults": timed(default_options_sleep), "sleep_op": timed(sleep_op)}
    print("| requested ms | " + " | ".join(f"{k}: measured ms" for k in fns) + " |")
    print("|---:|" + "---:|" * len(fns))
    for us in (int(x) for x in a.us.split(",")):
        cells = []
        for f in fns.values():
            f(tf.constant(us, tf.int64))
            ms = [1e3 * float(f(tf.constant(us, tf.int64))) for _ in range(a.calls)]
            cells.append(f"{sum(ms) / len(ms):.1f}")
        print(f"| {us / 1e3:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
