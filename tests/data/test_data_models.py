"""Specification of the data sets (tf_hetero.data) and reference models (tf_hetero.models).

No network and no cluster: tensorflow-datasets is monkeypatched, dataset functions run
without sharding.
"""

from __future__ import annotations

import numpy as np
import pytest

import tf_hetero.models as models
from tf_hetero import data
from tf_hetero.data import OFFLINE_DATASETS, Split, dataset_fn

from support import LazyModule

tf = LazyModule("tensorflow")

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)


def labels_split(n: int) -> Split:
    """n one-pixel examples whose label is their index, to follow them through a pipeline."""
    return Split(np.arange(n, dtype=np.float32).reshape(n, 1, 1, 1), np.arange(n, dtype=np.int64))


def batches(fn, n):
    return [(x.numpy(), y.numpy()) for x, y in fn(None).take(n)]


# --------------------------------------------------------------------------- digits


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", "train"), data.load("digits", "test")


def test_digits_and_mnist1d_are_the_offline_data_sets():
    assert OFFLINE_DATASETS == ("digits", "mnist1d")


@pytest.mark.slow
def test_mnist1d_is_generated_offline_with_4000_train_and_1000_test_signals(monkeypatch):
    import requests

    def no_network(*a, **k):
        raise AssertionError("mnist1d must be generated, not downloaded")

    monkeypatch.setattr(requests, "get", no_network)
    train, test = data.load("mnist1d", "train"), data.load("mnist1d", "test")
    assert train.x.shape == (4000, 40, 1) and test.x.shape == (1000, 40, 1)
    assert train.x.dtype == np.float32 and train.y.dtype == np.int64
    assert set(np.unique(train.y)) == set(range(10)) and train.num_classes == 10
    np.testing.assert_array_equal(data.load("mnist1d", "train").x, train.x)  # reproducible


@pytest.mark.slow
def test_cnn1d_fits_mnist1d_and_learns_it():
    import tf_keras as keras

    train, test = data.load("mnist1d", "train"), data.load("mnist1d", "test")
    model = models.build("cnn1d", input_shape=train.input_shape, seed=0)
    assert model.output_shape == (None, 10)
    model.compile(keras.optimizers.Adam(3e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(train.x, train.y, batch_size=64, epochs=3, verbose=0)
    assert model.evaluate(test.x, test.y, verbose=0)[1] > 0.3  # chance is 0.1


def test_digits_splits_have_1437_train_and_360_test_examples(digits):
    train, test = digits
    assert (len(train.x), len(train.y)) == (1437, 1437)
    assert (len(test.x), len(test.y)) == (360, 360)


def test_digits_train_and_test_share_no_image(digits):
    train, test = digits
    train_rows = {row.tobytes() for row in train.x}
    assert not any(row.tobytes() in train_rows for row in test.x)


def test_digits_images_are_8x8x1_float32_in_0_1(digits):
    for split in digits:
        assert split.x.shape[1:] == (8, 8, 1) and split.input_shape == (8, 8, 1)
        assert split.x.dtype == np.float32
        assert split.x.min() >= 0.0 and split.x.max() <= 1.0
        assert split.x.max() == 1.0  # scaled by the data's maximum (16), not by 255


def test_digits_labels_are_int64_0_to_9_in_both_splits(digits):
    for split in digits:
        assert split.y.dtype == np.int64
        assert set(split.y.tolist()) == set(range(10))
        assert split.num_classes == 10


def test_digits_split_is_the_same_on_every_call(digits):
    train, test = digits
    again_train, again_test = data.load("digits", "train"), data.load("digits", "test")
    np.testing.assert_array_equal(train.x, again_train.x)
    np.testing.assert_array_equal(train.y, again_train.y)
    np.testing.assert_array_equal(test.x, again_test.x)
    np.testing.assert_array_equal(test.y, again_test.y)


def test_load_defaults_to_digits_train(digits):
    np.testing.assert_array_equal(data.load().y, digits[0].y)


def test_load_rejects_unknown_split():
    with pytest.raises(ValueError, match=r"^split='validation': use 'train' or 'test'\.$"):
        data.load("digits", "validation")


# --------------------------------------------------------------------------- tensorflow-datasets


def test_unknown_tfds_name_raises_runtime_error_naming_offline_data_sets(monkeypatch):
    def fail(name, **kwargs):
        raise ValueError(f"no data set {name}")

    monkeypatch.setattr("tensorflow_datasets.load", fail)
    with pytest.raises(RuntimeError, match=r"^Could not load tensorflow-datasets data set 'nope' "
                                           r"\(ValueError: no data set nope\)\. It needs internet "
                                           r"the first time; offline, use one of \('digits', 'mnist1d'\)\.$"
                       ) as info:
        data.load("nope", "train")
    assert isinstance(info.value.__cause__, ValueError)


def test_tfds_images_are_scaled_to_0_1_and_given_a_channel(monkeypatch):
    calls = []

    def fake_load(name, **kwargs):
        calls.append((name, kwargs))
        x = tf.constant(np.array([[[0, 255], [51, 102]]] * 3, dtype=np.uint8))  # (3, 2, 2)
        return x, tf.constant([1, 2, 3], dtype=tf.int32)

    monkeypatch.setattr("tensorflow_datasets.load", fake_load)
    split = data.load("mnist", "test")
    assert calls == [("mnist", {"split": "test", "batch_size": -1, "as_supervised": True})]
    assert split.x.shape == (3, 2, 2, 1) and split.x.dtype == np.float32
    np.testing.assert_allclose(split.x[0, ..., 0], [[0.0, 1.0], [0.2, 0.4]])
    assert split.y.dtype == np.int64 and split.y.tolist() == [1, 2, 3]


# --------------------------------------------------------------------------- dataset_fn


def test_dataset_fn_yields_batches_of_digits_images_and_labels():
    (x, y), = batches(dataset_fn("digits", batch_size=32), 1)
    assert x.shape == (32, 8, 8, 1) and x.dtype == np.float32
    assert y.shape == (32,) and y.dtype == np.int64


def test_dataset_fn_batches_have_a_static_size_from_drop_remainder():
    ds = dataset_fn(batch_size=32)(None)
    x_spec, y_spec = ds.element_spec
    assert x_spec.shape.as_list() == [32, 8, 8, 1] and x_spec.dtype == tf.float32
    assert y_spec.shape.as_list() == [32] and y_spec.dtype == tf.int64


def test_dataset_fn_turns_tf_data_autotuning_off():
    """Its per-worker iterators then delete at once; with autotuning a dropped one blocks its
    worker for up to 60 s (benchmarks/tf_probes/iterator_delete.py)."""
    assert dataset_fn(batch_size=32)(None).options().autotune.enabled is False


def test_device_datasets_without_autotune_wraps_tensorflow_once():
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    from tf_hetero.data import without_autotune_after, device_datasets_without_autotune
    from tf_hetero.patching import wrapped_with

    device_datasets_without_autotune()
    wrapped = mdi._create_device_dataset
    device_datasets_without_autotune()
    assert mdi._create_device_dataset is wrapped
    assert wrapped_with(wrapped, without_autotune_after)
    assert not wrapped_with(wrapped.__wrapped__, without_autotune_after)


def test_dataset_fn_is_infinite_and_every_batch_is_full():
    fn = dataset_fn(batch_size=4, data=labels_split(10))
    assert fn(None).cardinality().numpy() == tf.data.INFINITE_CARDINALITY
    assert all(y.shape == (4,) for _, y in batches(fn, 10))


def test_dataset_fn_each_pass_is_a_shuffled_permutation():
    fn = dataset_fn(batch_size=4, data=labels_split(12), seed=3)
    ys = np.concatenate([y for _, y in batches(fn, 6)])
    first, second = ys[:12], ys[12:]
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(12))
    assert first.tolist() != list(range(12))
    assert first.tolist() != second.tolist()  # reshuffled on every pass


def test_dataset_fn_order_is_reproducible_from_seed():
    fn = dataset_fn(batch_size=4, data=labels_split(12), seed=3)
    a = np.concatenate([y for _, y in batches(fn, 6)])
    b = np.concatenate([y for _, y in batches(fn, 6)])
    np.testing.assert_array_equal(a, b)


def test_dataset_fn_keeps_images_with_their_labels():
    (x, y), = batches(dataset_fn(batch_size=6, data=labels_split(12)), 1)
    np.testing.assert_array_equal(x.reshape(-1), y.astype(np.float32))


def test_dataset_fn_with_data_does_not_load_name():
    fn = dataset_fn("no-such-data-set", batch_size=2, data=labels_split(4))
    assert batches(fn, 1)[0][1].shape == (2,)


def test_dataset_fn_with_one_worker_does_not_shard():
    fn = dataset_fn(batch_size=4, num_workers=1, data=labels_split(8))
    ys = np.concatenate([y for _, y in batches(fn, 2)])
    assert sorted(ys.tolist()) == list(range(8))


@pytest.mark.parametrize("batch_size", [0, -1])
def test_dataset_fn_rejects_batch_size_below_1(batch_size):
    with pytest.raises(ValueError, match=rf"^batch_size={batch_size}: need >= 1\.$"):
        dataset_fn(batch_size=batch_size)


@pytest.mark.parametrize("num_workers", [0, -2])
def test_dataset_fn_rejects_num_workers_below_1(num_workers):
    with pytest.raises(ValueError, match=rf"^num_workers={num_workers}: need >= 1 or None\.$"):
        dataset_fn(num_workers=num_workers)


def test_dataset_fn_rejects_too_few_examples_for_the_workers():
    with pytest.raises(ValueError, match=r"^10 examples cannot give each of 3 workers a batch of "
                                         r"4\. Fix: lower batch_size or num_workers\.$"):
        dataset_fn(batch_size=4, num_workers=3, data=labels_split(10))


def test_dataset_fn_accepts_exactly_enough_examples():
    dataset_fn(batch_size=4, num_workers=3, data=labels_split(12))


def test_dataset_fn_rejects_too_few_digits_for_the_workers():
    with pytest.raises(ValueError, match=r"^1437 examples cannot give each of 8 workers a batch "
                                         r"of 200\."):
        dataset_fn("digits", batch_size=200, num_workers=8)


# --------------------------------------------------------------------------- models


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_model_defaults_fit_the_digits(name):
    model = getattr(models, name)()
    assert model.input_shape == (None, 8, 8, 1)
    assert model.output_shape == (None, 10)
    assert model.name == name


@pytest.mark.parametrize("name, input_shape", [("mlp", (28, 28, 1)), ("cnn", (32, 32, 3))])
def test_model_takes_input_shape_and_num_classes(name, input_shape):
    model = getattr(models, name)(input_shape=input_shape, num_classes=5)
    assert model.input_shape == (None, *input_shape)
    assert model.output_shape == (None, 5)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_model_is_uncompiled_and_outputs_logits(name):
    model = models.build(name)
    assert not model._is_compiled
    assert model.layers[-1].activation.__name__ == "linear"


def test_mlp_has_one_dense_layer_per_hidden_size_plus_logits():
    model = models.mlp(hidden=(32, 16, 8))
    assert [layer.units for layer in model.layers[1:]] == [32, 16, 8, 10]


def test_model_runs_on_a_digits_batch():
    x = data.load("digits", "test").x[:5]
    for name in ("mlp", "cnn"):
        assert models.build(name)(x).shape == (5, 10)


def test_build_passes_keyword_arguments():
    assert models.build("cnn", num_classes=3).output_shape == (None, 3)


def test_models_registry_names_mlp_cnn_and_cnn1d():
    assert sorted(models.MODELS) == ["cnn", "cnn1d", "mlp"]


def test_build_rejects_unknown_model_naming_the_choices():
    with pytest.raises(ValueError, match=r"^Unknown model 'nope'\. Fix: use one of "
                                         r"\['cnn', 'cnn1d', 'mlp'\]\.$"):
        models.build("nope")


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_same_seed_gives_same_initial_weights(name):
    a, b = models.build(name, seed=5).get_weights(), models.build(name, seed=5).get_weights()
    assert len(a) == len(b)
    for wa, wb in zip(a, b):
        np.testing.assert_array_equal(wa, wb)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_different_seeds_give_different_initial_weights(name):
    a, b = models.build(name, seed=1).get_weights(), models.build(name, seed=2).get_weights()
    assert not np.array_equal(a[0], b[0])


def test_layers_of_the_same_shape_start_with_different_weights():
    model = models.mlp(hidden=(32, 32, 32))
    w = model.get_weights()
    assert w[2].shape == w[4].shape
    assert not np.array_equal(w[2], w[4])
