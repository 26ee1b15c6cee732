"""Reference models for demos and benchmarks (tf_keras; build them under ``strategy.scope()``).

>>> import tf_hetero.models as M                                      # doctest: +SKIP
>>> model = M.mlp(input_shape=(8, 8, 1), num_classes=10)
>>> model.output_shape
(None, 10)

Each builder returns an uncompiled ``tf_keras`` model (``keras3=True``: the same layers as a
Keras 3 one, ``import keras``, for :func:`tf_hetero.keras3.enable`) whose last layer gives
logits (compile with ``from_logits=True``). The default input shape fits the offline default
data set (:func:`tf_hetero.data.load` ``("digits")``: 8x8 grey images, 10 classes).

>>> M.cnn1d(keras3=True).output_shape                                 # doctest: +SKIP
(None, 10)
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["mlp", "cnn", "cnn1d", "build", "keras_module", "MODELS"]


def keras_module(keras3: bool = False):
    """The Keras the model is built with: tf_keras, or Keras 3 (``import keras``)."""
    if keras3:
        import keras
    else:
        import tf_keras as keras
    return keras


def _init(keras, seed: int, layer: int):
    """A seeded initializer per layer: one shared seeded initializer would give layers of the
    same shape identical starting weights."""
    return keras.initializers.GlorotUniform(seed=seed * 1000 + layer)


def _input(keras, shape, keras3: bool) -> list:
    """The model's input: an ``InputLayer`` (tf_keras), ``keras.Input`` (Keras 3, whose
    layers take no ``input_shape``)."""
    return [keras.Input(tuple(shape))] if keras3 else [
        keras.layers.InputLayer(input_shape=tuple(shape))]


def mlp(input_shape: Sequence[int] = (8, 8, 1), num_classes: int = 10,
        hidden: Sequence[int] = (128, 64), seed: int = 0, keras3: bool = False):
    """A multilayer perceptron: flatten, ReLU dense layers, logits."""
    keras = keras_module(keras3)
    if keras3:
        layers = _input(keras, input_shape, keras3) + [keras.layers.Flatten()]
    else:
        layers = [keras.layers.Flatten(input_shape=tuple(input_shape))]
    layers += [keras.layers.Dense(h, activation="relu", kernel_initializer=_init(keras, seed, i))
               for i, h in enumerate(hidden)]
    layers.append(keras.layers.Dense(num_classes,
                                     kernel_initializer=_init(keras, seed, len(hidden))))
    return keras.Sequential(layers, name="mlp")


def cnn(input_shape: Sequence[int] = (8, 8, 1), num_classes: int = 10,
        filters: Sequence[int] = (16, 32), dense: int = 64, seed: int = 0,
        keras3: bool = False):
    """A small CNN: 3x3 conv blocks with 2x2 max-pooling, a dense layer, logits."""
    keras = keras_module(keras3)
    layers = _input(keras, input_shape, keras3)
    for i, f in enumerate(filters):
        layers += [keras.layers.Conv2D(f, 3, padding="same", activation="relu",
                                       kernel_initializer=_init(keras, seed, i)),
                   keras.layers.MaxPooling2D(2, padding="same")]
    k = len(filters)
    layers += [keras.layers.Flatten(),
               keras.layers.Dense(dense, activation="relu",
                                  kernel_initializer=_init(keras, seed, k)),
               keras.layers.Dense(num_classes, kernel_initializer=_init(keras, seed, k + 1))]
    return keras.Sequential(layers, name="cnn")


def cnn1d(input_shape: Sequence[int] = (40, 1), num_classes: int = 10,
          filters: Sequence[int] = (25, 25, 25), kernel: int = 5, seed: int = 0,
          keras3: bool = False):
    """A small 1-D CNN for MNIST-1D (after Greydanus 2020): strided 1-D convolutions, logits."""
    keras = keras_module(keras3)
    layers = _input(keras, input_shape, keras3)
    for i, f in enumerate(filters):
        layers.append(keras.layers.Conv1D(f, kernel, strides=2, padding="same",
                                          activation="relu",
                                          kernel_initializer=_init(keras, seed, i)))
    layers += [keras.layers.Flatten(),
               keras.layers.Dense(num_classes,
                                  kernel_initializer=_init(keras, seed, len(filters)))]
    return keras.Sequential(layers, name="cnn1d")


MODELS = {"mlp": mlp, "cnn": cnn, "cnn1d": cnn1d}


def build(name: str, **kwargs):
    """Builds a reference model by name (``"mlp"``, ``"cnn"`` or ``"cnn1d"``)."""
    try:
        return MODELS[name](**kwargs)
    except KeyError:
        raise ValueError(f"Unknown model {name!r}. Fix: use one of {sorted(MODELS)}.") from None
