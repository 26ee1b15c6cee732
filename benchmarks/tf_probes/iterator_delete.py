"""How long deleting a tf.data iterator takes, with and without autotuning, after it has been
used for a while. In TensorFlow 2.21 the autotuning thread's timed sleep (doubling up to 60 s)
is not woken by the iterator's cancellation, so the deletion waits for it to end.

    .venv/bin/python benchmarks/tf_probes/iterator_delete.py [SECONDS ...]   (default 5 30 90)

Each SECONDS makes two iterators of one small pipeline (shuffle, batch, prefetch(2): nothing
to tune), reads one batch from each, and deletes them SECONDS after the start. Light on CPU
(it sleeps); written up in docs/TF_INTERNALS.md, "Dropped iterators and tf.data autotuning".
"""

from __future__ import annotations

import sys
import time

import tensorflow as tf


def make(autotune: bool):
    ds = tf.data.Dataset.range(10**9).shuffle(100).batch(4).prefetch(2)
    options = tf.data.Options()
    options.autotune.enabled = autotune
    return iter(ds.with_options(options))


def main(argv: list[str]) -> None:
    ages = sorted(float(a) for a in argv) or [5.0, 30.0, 90.0]
    iterators = {(age, on): make(on) for age in ages for on in (True, False)}
    for it in iterators.values():
        next(it)  # the autotuning thread starts at the first element
    t0 = time.monotonic()
    print("| used for | autotuning | deletion took |\n|---:|---|---:|")
    for age in ages:
        time.sleep(max(0.0, t0 + age - time.monotonic()))
        for on in (True, False):
            it = iterators.pop((age, on))
            start = time.monotonic()
            del it
            print(f"| {start - t0:.0f} s | {'on' if on else 'off'} | "
                  f"{time.monotonic() - start:.2f} s |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
