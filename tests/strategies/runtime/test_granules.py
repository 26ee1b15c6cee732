"""The granule reader of sized tasks (strategies.runtime.granules): a task of size n reads
exactly the next n granules, in order, as one batch, from a plain iterator and from a
distributed iterator (what a worker's step gets)."""
from __future__ import annotations

import pytest

from support import LazyModule

tf = LazyModule("tensorflow")
granules = LazyModule("tf_hetero.strategies.runtime.granules")

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)

GRANULE = 4


def _granules():
    """Samples 0, 1, 2, ... (a feature row and a label each) in batches of 8, as granules."""
    ds = tf.data.Dataset.range(10_000).map(
        lambda i: (tf.fill([3], tf.cast(i, tf.float32)), i)).batch(8).repeat()
    data, batch = granules.granulate(ds, GRANULE, "test")
    assert batch == 8
    return data


def _plain():
    return iter(_granules())


def _distributed():
    """A one-device distributed iterator (input_lib.DistributedIterator)."""
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    return iter(strategy.distribute_datasets_from_function(lambda _: _granules()))


@pytest.mark.parametrize("static", [False, True], ids=["tensor", "traced"])
@pytest.mark.parametrize("make", [_plain, _distributed], ids=["plain", "distributed"])
def test_a_task_reads_its_size_in_granules_in_order(make, static):
    """A size tensor gives a dynamic batch; a Python int (AutoStrategy's asynchronous step)
    is unrolled when traced, one trace per size, with the batch's static shape."""
    iterator, start = make(), 0
    seen = []

    @tf.function
    def read(iterator, size):
        x, y = next(granules.GranuleIterator(iterator, size))
        seen.append((x.shape.as_list(), y.shape.as_list()))
        return x, y

    sizes = (1, 3, 2, 5, 1) if not static else (3, 3, 1)
    for size in sizes:
        x, y = read(iterator, size if static else tf.constant(size, tf.int64))
        expected = list(range(start, start + size * GRANULE))
        assert y.numpy().tolist() == expected
        assert x.numpy()[:, 0].tolist() == expected
        start += size * GRANULE
    if static:
        assert seen == [([3 * GRANULE, 3], [3 * GRANULE]), ([GRANULE, 3], [GRANULE])]
    else:
        assert seen[0] == ([None, 3], [None])  # the batch varies; the features stay static


def test_granulate_refuses_a_batch_that_is_not_a_multiple():
    ds = tf.data.Dataset.range(100).batch(6, drop_remainder=True)
    with pytest.raises(ValueError, match="not a multiple of granularity=4"):
        granules.granulate(ds, GRANULE, "test")
