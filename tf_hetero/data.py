"""Data sets as ``DatasetCreator``-ready dataset functions that shard per worker.

- ``"digits"`` (the offline default): the UCI handwritten digits (scikit-learn's
  ``load_digits``: 1,797 8x8 grey images, 10 classes), shipped inside the package, so demos and
  tests need no network. Split once with a fixed seed into 1,437 train / 360 test images.
- ``"mnist1d"`` (offline): MNIST-1D (Greydanus 2020), 1-D signals of length 40 in 10
  classes, generated procedurally by the ``mnist1d`` package with its default arguments
  (seed 42: 4,000 train / 1,000 test), no download. Harder than digits, and its useful batch
  size is larger: a problem where synchronous rounds are not beaten on samples alone.
- any tensorflow-datasets name with ``image`` and ``label`` features (``"mnist"``,
  ``"cifar10"``, ...), loaded with ``tfds.load``: needs internet the first time (Colab).

>>> train_fn = dataset_fn("digits", batch_size=32, num_workers=4)    # doctest: +SKIP
>>> model.fit(tf_keras.utils.experimental.DatasetCreator(train_fn),    # doctest: +SKIP
...           epochs=2, steps_per_epoch=50)

Inside a PS cluster the ``InputContext`` cannot tell workers apart (docs/TF_INTERNALS.md), so the
function tells them apart by ``experimental_get_current_worker_index()``: by default each
worker reads its own 1/num_workers of the training set, reshuffled on every pass; with
``per_worker="reshuffle"`` each reads the whole set in its own order (see :func:`dataset_fn`
for when that matters).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

import numpy as np


__all__ = ["Split", "load", "dataset_fn", "check_per_worker", "without_autotune",
           "without_autotune_after", "device_datasets_without_autotune", "OFFLINE_DATASETS"]

OFFLINE_DATASETS = ("digits", "mnist1d")
_DIGITS_PATH = os.path.join(os.path.dirname(__file__), "resources", "digits.npz")
_DIGITS_TEST = 360


@dataclasses.dataclass(frozen=True)
class Split:
    """One split as arrays: inputs (images scaled to [0, 1] as (N, H, W, C); MNIST-1D signals
    as (N, 40, 1)) and integer labels (N,)."""

    x: np.ndarray
    y: np.ndarray

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1


def _digits(split: str) -> Split:
    with np.load(_DIGITS_PATH) as f:
        x = f["x"].astype(np.float32)[..., None] / 16.0
        y = f["y"].astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    idx = order[_DIGITS_TEST:] if split == "train" else order[:_DIGITS_TEST]
    return Split(x[idx], y[idx])


@functools.lru_cache(maxsize=1)
def _mnist1d_arrays() -> dict:
    # Generated, not downloaded (get_dataset() would fetch a pickle): ~3-5 s, once a process.
    from mnist1d.data import get_dataset_args, make_dataset

    return make_dataset(get_dataset_args())


def _mnist1d(split: str) -> Split:
    d = _mnist1d_arrays()
    x, y = (d["x"], d["y"]) if split == "train" else (d["x_test"], d["y_test"])
    return Split(x.astype(np.float32)[..., None], y.astype(np.int64))


def load(name: str = "digits", split: str = "train") -> Split:
    """Loads a whole split as arrays (``split`` is ``"train"`` or ``"test"``)."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: use 'train' or 'test'.")
    if name == "digits":
        return _digits(split)
    if name == "mnist1d":
        return _mnist1d(split)
    import tensorflow_datasets as tfds

    try:
        x, y = tfds.as_numpy(tfds.load(name, split=split, batch_size=-1, as_supervised=True))
    except Exception as e:  # network or unknown-name failures: say what to do
        raise RuntimeError(
            f"Could not load tensorflow-datasets data set {name!r} ({type(e).__name__}: {e}). "
            f"It needs internet the first time; offline, use one of {OFFLINE_DATASETS}.") from e
    x = x.astype(np.float32) / 255.0
    if x.ndim == 3:
        x = x[..., None]
    return Split(x, y.astype(np.int64))


#: How workers divide the training set (``dataset_fn(per_worker=...)``).
PER_WORKER = ("shard", "reshuffle")


def check_per_worker(per_worker: str) -> None:
    """Refuses a ``per_worker`` that is none of :data:`PER_WORKER` (:func:`dataset_fn`, the
    simulator's learner)."""
    if per_worker not in PER_WORKER:
        raise ValueError(f"per_worker={per_worker!r}: use one of "
                         f"{', '.join(repr(p) for p in PER_WORKER)}.")


def dataset_fn(name: str = "digits", batch_size: int = 32, num_workers: int | None = None,
               seed: int = 0, split: str = "train", data: Split | None = None,
               per_worker: str = "shard") -> Callable:
    """A ``dataset_fn(input_context)`` for ``DatasetCreator``: infinite, shuffled, batched.

    Args:
      name: data set name (see module docstring); ignored when ``data`` is given.
      batch_size: micro-batch size of one task.
      num_workers: the workers reading it (``None``/1: one reader, no division).
      seed: shuffle seed.
      split: ``"train"`` or ``"test"``.
      data: arrays to use instead of loading ``name``.
      per_worker: ``"shard"``: each worker reads its own 1/num_workers of the set (the TF
        tutorial's); ``"reshuffle"``: each worker reads the whole set in its own order
        (the shuffle seed mixed with its index). Sharding is unbiased only if every worker
        reads at the same rate: when a fast worker reads more (stock PSS, H-PS, EPSP), its
        shard is seen more often and a slow worker's less, so the model trains on a
        skewed sample (measured on one_slow: final accuracy 2.7-6 points below BSP's at
        an equal budget, benchmarks/results/2026-11-27-budget/). With ``"reshuffle"``
        every sample is as likely whichever worker is fast.

    >>> dataset_fn(per_worker="split")
    Traceback (most recent call last):
    ...
    ValueError: per_worker='split': use one of 'shard', 'reshuffle'.
    """
    check_per_worker(per_worker)
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}: need >= 1.")
    if num_workers is not None and num_workers < 1:
        raise ValueError(f"num_workers={num_workers!r}: need >= 1 or None.")
    data = data or load(name, split)
    if per_worker == "shard" and num_workers and len(data.y) < num_workers * batch_size:
        raise ValueError(f"{len(data.y)} examples cannot give each of {num_workers} workers a "
                         f"batch of {batch_size}. Fix: lower batch_size or num_workers.")

    def fn(input_context=None):
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensor_slices((data.x, data.y))
        shuffle_seed = seed
        if num_workers and num_workers > 1:
            worker = tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(),
                             tf.int64)
            if per_worker == "shard":
                ds = ds.shard(num_workers, worker)
            else:  # the whole set, in an order of its own
                shuffle_seed = tf.constant(seed, tf.int64) * 1_000_003 + worker
        ds = ds.shuffle(len(data.y), seed=shuffle_seed, reshuffle_each_iteration=True)
        # No stage here is tunable (fixed prefetch, no parallel map), so autotuning only
        # costs: each dropped per-worker iterator would block its worker for up to 60 s.
        return without_autotune(ds.repeat().batch(batch_size, drop_remainder=True).prefetch(2))

    return fn


def without_autotune(dataset):
    """``dataset`` with tf.data autotuning off, so that its iterators delete at once.

    In TensorFlow 2.21, deleting an iterator of an autotuned pipeline waits until the
    autotuning thread's timed sleep ends (cancelling does not wake it), and that sleep grows
    to 60 s after a minute of use: measured, an iterator used for 30 s took 11 s to delete,
    one used for 90 s took 52 s, the same pipeline without autotuning under 10 ms
    (``benchmarks/tf_probes/iterator_delete.py``). On a worker of a parameter-server
    cluster the deletion of a per-worker iterator the chief dropped (at the end of a
    ``fit``, or when the cluster closes) runs inline in the worker's eager executor: every
    later step sent to that worker waits behind it, and ``LocalCluster.stop`` waits for it
    (docs/TF_INTERNALS.md, "Dropped iterators and tf.data autotuning"). Use it on pipelines
    that have nothing to tune (fixed buffer sizes, no ``AUTOTUNE`` parallelism): on a pipeline
    with ``AUTOTUNE`` stages it trades their tuning for the quick deletion.

    >>> import tensorflow as tf
    >>> without_autotune(tf.data.Dataset.range(3)).options().autotune.enabled
    False
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def device_datasets_without_autotune() -> None:
    """Turns tf.data autotuning off for the per-device datasets TensorFlow builds inside every
    multi-device iterator of this process (idempotent).

    A parameter-server per-worker iterator is a ``MultiDeviceIterator`` on the worker: the
    user's pipeline (which :func:`without_autotune` covers) feeds one small per-device
    dataset (a generator and a fixed prefetch of 1) that TensorFlow builds with default
    options, so it is autotuned although it has nothing to tune ("There are no tunable
    parameters", in its log), and deleting its iterator waits for the autotuning thread's
    sleep as above. That deletion happens when the context closes, for every iterator still
    alive (a bench keeps its finished rows alive): measured, ``make demo``'s four rows, then
    ``LocalCluster.stop``, waited 37 s for the workers' ``CloseContext`` (and 3.8-19 s for two
    rows), 0.1 s with this installed (docs/TF_INTERNALS.md, "Dropped iterators and tf.data
    autotuning"). Every tf-hetero strategy installs it when it is made, and the bench before
    its first row, so that stock PSS rows get it too; call it yourself for stock
    ``ParameterServerStrategy``. Changes nothing but the autotuning of those per-device
    stages, which have no tunable parameter. It wraps the module function
    ``tensorflow.python.data.ops.multi_device_iterator_ops._create_device_dataset``: check
    it on a TensorFlow upgrade (docs/TF_INTERNALS.md, "Auditing an upgrade").

    >>> device_datasets_without_autotune()
    >>> import tensorflow as tf
    >>> from tensorflow.python.data.ops import multi_device_iterator_ops
    >>> it = multi_device_iterator_ops.OwnedMultiDeviceIterator(
    ...     tf.data.Dataset.range(4), ["/cpu:0"])
    >>> it._device_iterators[0]._dataset.options().autotune.enabled
    False
    """
    from tf_hetero import tfcompat

    tfcompat.ops.wrap_device_datasets(without_autotune_after)


def without_autotune_after(make):
    """``make`` (a function that returns a dataset: a ``dataset_fn``, TensorFlow's per-device
    dataset factory) whose datasets come with autotuning off (:func:`without_autotune`)."""
    def made_without_autotune(*args, **kwargs):
        return without_autotune(make(*args, **kwargs))

    return made_without_autotune
