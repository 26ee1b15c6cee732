"""Sized tasks' data (per-worker batch sizes): the workers' data in granules, and the iterator
a sized task reads ``n`` granules from as one batch.

A strategy with per-worker batch sizes (:class:`~tf_hetero.policies.BalancedBatches`, H-PS)
splits each round's global batch into tasks of different sizes, one per worker. The unit is a
*granule* of ``g`` samples: the strategy re-batches the workers' data into granules when it
distributes it (:func:`granulate`), and a task of size ``n`` reads ``n`` granules and
concatenates them into one batch (:class:`GranuleIterator`): one forward and backward pass over
``n x g`` samples, whose mean gradient then weighs ``n`` in the round's mean (exactly one step
on the round's whole batch).
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.strategies.runtime.fitplan import counted, fits_handler, state_of

__all__ = ["granulate", "GranuleIterator", "install", "is_iterator", "whole_batches",
           "for_evaluation"]


def whole_batches(strategy):
    """Datasets ``strategy`` distributes inside this block are left in whole batches: not
    re-batched into granules, and they do not set the rounds' global batch (the strategy's
    ``distribute_datasets_from_function`` / ``experimental_distribute_dataset``). For
    evaluation data: a step that is not a training task reads one element per ``next``."""
    return counted(strategy, "whole_batches")


def for_evaluation(strategy):
    """The block evaluation data (``evaluate``'s, ``fit``'s validation) is made in:
    :func:`whole_batches` under a sized tf-hetero strategy, nothing under any other (tf_keras's
    data handlers, :func:`install`; the Keras 3 loop, ``runtime/keras3/loop.py``)."""
    if state_of(strategy) is None or strategy.config.granule is None:
        return contextlib.nullcontext()
    return whole_batches(strategy)


def install() -> None:
    """Wraps tf_keras's ``get_data_handler`` (once per process): the data of ``evaluate``,
    ``predict`` and ``fit``'s validation under a sized strategy stays in whole batches.

    Re-batched into granules, an evaluation step read one granule per batch (measured: the
    first 8 of each 64 rows) and the evaluation dataset's batch became the rounds' global
    batch (a fit with a validation batch twice its training batch doubled its rounds after
    the first validation). tf_keras makes the data handler's per-worker dataset while the
    handler is built (``data_adapter._ClusterCoordinatorDataHandler``), so the distribution
    happens inside the call (fit's own handler: :func:`fitplan.fits_handler`)."""
    tfcompat.keras.wrap_data_handler(_evaluation_in_whole_batches)


def _evaluation_in_whole_batches(original):
    def get_data_handler(*args, **kwargs):
        if fits_handler(kwargs):
            return original(*args, **kwargs)
        with for_evaluation(getattr(kwargs.get("model"), "distribute_strategy", None)):
            return original(*args, **kwargs)

    return get_data_handler


def dataset_batch(dataset: tf.data.Dataset) -> int | None:
    """The batch size of ``dataset``'s elements: static in its element spec
    (``drop_remainder=True``), else the constant ``batch_size`` of the last ``batch()`` in its
    pipeline (``ds.batch(64).repeat()``, the TF tutorial's: a private ``_batch_size`` of TF's
    batch datasets, docs/TF_INTERNALS.md); ``None`` if neither is known."""
    sizes = {s.shape[0] if s.shape.rank else None
             for s in tf.nest.flatten(dataset.element_spec) if hasattr(s, "shape")}
    size = sizes.pop() if len(sizes) == 1 else None
    if size is not None:
        return int(size)
    return tfcompat.ops.dataset_batch_size(dataset)


def granulate(dataset: tf.data.Dataset, granule: int, who: str) -> tuple[tf.data.Dataset, int]:
    """``dataset`` (batched) re-batched into granules of ``granule`` samples, and its batch.

    Raises a clear error when the batch is unknown (batch with ``drop_remainder=True``) or
    not a multiple of ``granule``.
    """
    batch = dataset_batch(dataset)
    if batch is None:
        raise ValueError(
            f"{who}: the batch size of the workers' dataset is not known "
            f"({dataset.element_spec}); per-worker batch sizes are granules of it. Fix: end "
            "the dataset with a constant .batch(n) (or drop_remainder=True).")
    if batch % granule:
        raise ValueError(f"{who}: the dataset's batch size {batch} is not a multiple of "
                         f"granularity={granule}. Fix: pass granularity= a divisor of {batch}.")
    granules = dataset.rebatch(granule, drop_remainder=True)
    # A dataset given to fit() whole (not by a DatasetCreator) goes through TF's auto-shard
    # even though ParameterServerStrategy makes one shard of it, and that graph rewrite turns
    # a RebatchDatasetV2 into the legacy rebatch by replicas (one per worker): the workers
    # then read whole batches where the element spec says granules, and a sized task failed
    # with "The given optional does not match the expected shape" (docs/TF_INTERNALS.md).
    # With one shard there is nothing to shard, so auto-shard is turned off here.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return granules.with_options(options), batch


def is_iterator(value) -> bool:
    """A tf.data or distributed iterator (what a step calls ``next`` on)."""
    return hasattr(value, "get_next") and hasattr(value, "__next__")


class GranuleIterator:
    """Stands in for a worker's iterator in a sized task: ``next()`` reads ``size`` granules
    (an int64 tensor, >= 1, or a Python int fixed when the step is traced) and returns them
    concatenated as one batch; everything else is the wrapped iterator's."""

    def __init__(self, iterator, size: tf.Tensor):
        self._iterator, self._size = iterator, size

    def __iter__(self):
        return self

    def __next__(self):
        return self.get_next()

    def get_next(self):
        if isinstance(self._size, int):  # known when traced: the reads unrolled
            return self._read_static(self._size)
        first = next(self._iterator)
        flat = tf.nest.flatten(first)
        arrays = tuple(tf.TensorArray(t.dtype, size=0, dynamic_size=True, infer_shape=False)
                       .write(0, t) for t in flat)

        def more(i, *_):
            return i < self._size

        def read(i, *arrays):
            nxt = tf.nest.flatten(next(self._iterator))
            return (i + 1,) + tuple(a.write(tf.cast(i, tf.int32), x) for a, x in zip(arrays, nxt))

        _, *arrays = tf.while_loop(more, read, (tf.constant(1, tf.int64),) + arrays)
        parts = [tf.ensure_shape(a.concat(), [None] + t.shape[1:].as_list())
                 for a, t in zip(arrays, flat)]
        return tf.nest.pack_sequence_as(first, parts)

    def _read_static(self, size: int):
        # An asynchronous step of AutoStrategy always reads one dataset batch (the same number
        # of granules): ``size`` reads and one concat, with the batch's static shape, where the
        # loop above builds tensor arrays in a while loop on every step.
        reads = [next(self._iterator) for _ in range(size)]
        if size == 1:
            return reads[0]
        columns = zip(*(tf.nest.flatten(r) for r in reads))
        return tf.nest.pack_sequence_as(reads[0], [tf.concat(c, axis=0) for c in columns])

    def __getattr__(self, name):
        return getattr(self._iterator, name)
