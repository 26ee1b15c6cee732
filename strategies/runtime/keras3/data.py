"""The workers' data for a Keras 3 ``fit``/``evaluate`` on a parameter-server cluster, and
the chief's batches for ``predict``.

``fit`` and ``evaluate`` read per-worker datasets, made as tf_keras makes them under
``ParameterServerStrategy`` (tk/engine/data_adapter.py ``_ClusterCoordinatorDataHandler``),
through the strategy's own distribution functions (so a strategy that overrides them, as
tf-hetero's sized strategies do, sees the data):

- a dataset function (``input_context -> tf.data.Dataset``; a tf_keras ``DatasetCreator``
  is one, and its ``input_options`` are passed on):
  ``coordinator.create_per_worker_dataset(lambda: strategy.distribute_datasets_from_function(fn))``;
- a ``tf.data.Dataset``, or NumPy arrays/tensors (turned into the dataset Keras itself would
  train on, by its data adapter, then repeated):
  ``coordinator.create_per_worker_dataset(strategy.experimental_distribute_dataset(ds))``;
- a dataset the user already distributed with the strategy: as it is.

Each worker builds and reads its own copy from the start. The model is built from the
per-worker dataset's ``element_spec``: no batch is pulled on the chief (Keras 3's own ``fit``
pulls one there, which a per-worker dataset refuses).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.strategies.runtime.keras3 import checks

__all__ = ["WorkerData", "per_worker", "chief_batches", "is_dataset_function"]


@dataclasses.dataclass
class WorkerData:
    """A per-worker dataset and the spec of one of its elements (one batch)."""

    dataset: Any
    element_spec: Any
    _iterator: Any = None

    def iterator(self):
        """The per-worker iterator, made once (``fit`` continues it across epochs, as Keras
        continues its iterator when ``steps_per_epoch`` is given)."""
        if self._iterator is None:
            self._iterator = iter(self.dataset)
        return self._iterator


def is_dataset_function(x) -> bool:
    """A callable that makes a dataset (not a dataset, not a Keras ``PyDataset``)."""
    return callable(x) and not isinstance(x, (tf.data.Dataset, tf.distribute.DistributedDataset))


def per_worker(coordinator, strategy, x, y=None, sample_weight=None, batch_size=None,
               class_weight=None, shuffle=False, *, needed: int, method: str,
               what: str = "training") -> WorkerData:
    """The per-worker dataset of ``x`` (see the module's docstring), checked before any
    worker is asked for it. ``needed``: the most batches one worker may read (the steps it
    may take); a finite dataset shorter than that is refused."""
    if isinstance(x, tf.distribute.DistributedDataset):
        for name, value in (("y", y), ("sample_weight", sample_weight),
                            ("class_weight", class_weight)):
            if value is not None:
                checks.refuse_extra(name, method)
        dataset = coordinator.create_per_worker_dataset(x)
    elif is_dataset_function(x):
        for name, value in (("y", y), ("sample_weight", sample_weight),
                            ("class_weight", class_weight)):
            if value is not None:
                checks.refuse_extra(name, method)
        options = getattr(x, "input_options", None)

        def per_worker_dataset_fn():
            return strategy.distribute_datasets_from_function(x, options=options)

        dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    elif isinstance(x, tf.data.Dataset) or tfcompat.keras3.is_array_data(x, y, sample_weight):
        arrays = not isinstance(x, tf.data.Dataset)
        ds = tfcompat.keras3.tf_dataset(x, y, sample_weight, batch_size=batch_size,
                                        shuffle=shuffle if arrays else False,
                                        class_weight=class_weight)
        if arrays:
            ds = ds.repeat()  # one pass is Keras's epoch; here steps end an epoch
        checks.check_cardinality(int(ds.cardinality()), needed, what)
        dataset = coordinator.create_per_worker_dataset(strategy.experimental_distribute_dataset(ds))
    else:
        checks.refuse_input(x, method)
    return WorkerData(dataset, dataset.element_spec)


def chief_batches(x, batch_size=None, steps=None):
    """``predict``'s input batches, in order, read on the chief (a ``tf.data.Dataset`` or
    arrays, as Keras batches them), at most ``steps`` of them."""
    if isinstance(x, tf.distribute.DistributedDataset) or is_dataset_function(x):
        checks.refuse_predict_input(x)
    if not (isinstance(x, tf.data.Dataset) or tfcompat.keras3.is_array_data(x)):
        checks.refuse_input(x, "predict")
    ds = tfcompat.keras3.tf_dataset(x, batch_size=batch_size)
    if steps is not None:
        ds = ds.take(int(steps))
    return ds
