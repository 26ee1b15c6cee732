"""The sleep op every emulated time is made of (device time, link, PS service)."""

from __future__ import annotations

import tensorflow as tf

from tf_hetero import tfcompat

__all__ = ["sleep_op"]


def _sleep_options() -> tf.data.Options:
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.autotune.enabled = False
    return options


_SLEEP_OPTIONS = _sleep_options()


def sleep_op(microseconds: tf.Tensor) -> tf.Tensor:
    """An op that blocks the current device for ``microseconds`` (int64 scalar tensor).

    Built from ``SleepDataset`` because TensorFlow has no public sleep op; the dataset is
    created and drained inside the calling function, so nothing can prefetch it. tf.data's
    default graph optimizations and autotuning are switched off for it: with them each sleep
    cost ~3-4 ms more than asked on an idle 2-core machine and a 20 ms sleep often took 40 ms
    (docs/TF_INTERNALS.md section 9); without them the excess is ~1 ms.
    """
    ds = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64))
    ds = ds.apply(tfcompat.ops.sleep_dataset(tf.cast(microseconds, tf.int64)))
    ds = ds.with_options(_SLEEP_OPTIONS)
    # One get_next only: get_single_element() would probe for a second element and sleep
    # twice (measured: a 100 ms budget took 200 ms).
    return next(iter(ds))
