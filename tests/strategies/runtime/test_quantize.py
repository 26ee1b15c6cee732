"""The push codecs (strategies/runtime/quantize.py; TensorFlow ops, eager, no cluster): the
bytes each codec puts on the wire, unbiased stochastic rounding, the error bound, and error
feedback."""

from __future__ import annotations

import numpy as np
import pytest

from support import LazyModule

tf = LazyModule("tensorflow")
quantize = LazyModule("tf_hetero.strategies.runtime.quantize")

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)

# ---------------------------------------------------------------------------- codecs


@pytest.mark.parametrize("name, ratio", [("fp32", 1.0), ("fp16", 2.0), ("int8", 3.99),
                                         ("int4", 7.99)])
def test_payload_bytes_shrink_with_the_codec(name, ratio):
    codec = quantize.get(name)
    n = 17_000
    payload = codec.encode(tf.random.normal([n]))
    wire = sum(int(np.prod(p.shape)) * p.dtype.size for p in payload)
    assert wire == codec.payload_bytes(n)
    assert 4 * n / wire >= ratio


@pytest.mark.slow
@pytest.mark.parametrize("name", ["int8", "int4"])
def test_stochastic_rounding_is_unbiased(name):
    codec = quantize.get(name)
    x = tf.constant(np.linspace(-1, 1, 101), tf.float32)
    mean = tf.add_n([codec.decode(codec.encode(x), x.shape) for _ in range(400)]) / 400
    step = 1.0 / codec.levels
    assert float(tf.reduce_max(tf.abs(mean - x))) < 0.2 * step


@pytest.mark.parametrize("name", ["fp16", "int8", "int4"])
def test_decode_round_trips_shape_and_error_bound(name):
    codec = quantize.get(name)
    x = tf.random.normal([3, 5, 7])
    y = codec.decode(codec.encode(x), x.shape)
    assert y.shape == x.shape
    bound = float(tf.reduce_max(tf.abs(x))) / getattr(codec, "levels", 1000)
    assert float(tf.reduce_max(tf.abs(y - x))) <= bound + 1e-3


def test_error_feedback_keeps_the_sum_of_pushes_on_the_sum_of_gradients():
    codec = quantize.get("int4")
    residual = tf.zeros([64])
    total = sent = tf.zeros([64])
    for i in range(30):
        g = tf.random.stateless_normal([64], seed=[i, 0]) * 0.01
        payload, residual = quantize.compress(codec, g, residual)
        total, sent = total + g, sent + codec.decode(payload, [64])
    drift = float(tf.reduce_max(tf.abs(total - sent)))
    assert drift == pytest.approx(float(tf.reduce_max(tf.abs(residual))), abs=1e-5)
    assert drift < 0.05


def test_unknown_codec_names_the_choices():
    with pytest.raises(ValueError, match="quantize='int3'.*int8"):
        quantize.get("int3")
