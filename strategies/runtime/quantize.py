"""Gradient codecs for pushes: fp32, fp16, int8 and 4-bit, with stochastic rounding.

A codec turns a float tensor into a *payload* (a tuple of tensors) that is what crosses the
network, and back. :class:`tf_hetero.HPSStrategy` encodes on the worker and decodes on the
PS task (the decode op is placed on the PS device), so the bytes that travel are the
payload's: ``payload_bytes(n)`` of them for an ``n``-element gradient.

- ``fp32``: the tensor as it is (4 bytes per element).
- ``fp16``: a cast (2 bytes per element).
- ``int8``: ``round_stochastic(x / s)`` in ``[-127, 127]`` with one float32 scale
  ``s = max|x| / 127`` per tensor (1 byte per element + 4).
- ``int4``: the same in ``[-7, 7]``, two values packed per byte (0.5 byte per element + 4).

Stochastic rounding rounds ``v`` up with probability ``v - floor(v)``, so a decoded value is
unbiased (its expectation is ``x``). Error feedback (the push path keeps what the codec lost,
``residual = (g + residual) - decode(encode(g + residual))``, and adds it to the next push)
makes the *sum* of pushes track the sum of gradients; see :func:`compress`.

>>> import numpy as np, tensorflow as tf
>>> codec = get("int8")
>>> x = tf.constant(np.linspace(-1, 1, 5), tf.float32)
>>> payload = codec.encode(x)
>>> [p.dtype.name for p in payload], codec.payload_bytes(5)
(['int8', 'float32'], 9)
>>> float(tf.reduce_max(tf.abs(codec.decode(payload, x.shape) - x))) <= 1 / 127 + 1e-6
True
>>> get("int4").payload_bytes(17_000), get("fp32").payload_bytes(17_000)
(8504, 68000)
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["Codec", "get", "names", "compress"]


class Codec:
    """Encodes a float32 tensor into the payload that is pushed, and decodes it."""

    name = "fp32"
    bits = 32

    def encode(self, x: tf.Tensor) -> tuple:
        return (tf.cast(x, tf.float32),)

    def decode(self, payload: tuple, shape) -> tf.Tensor:
        return tf.reshape(tf.cast(payload[0], tf.float32), shape)

    def payload_bytes(self, num_elements: int) -> int:
        """Bytes a pushed ``num_elements``-element tensor takes on the wire."""
        return 4 * num_elements

    def __repr__(self):
        return f"{type(self).__name__}()"


class Float16(Codec):
    name, bits = "fp16", 16

    def encode(self, x):
        return (tf.cast(x, tf.float16),)

    def payload_bytes(self, num_elements):
        return 2 * num_elements


class Int(Codec):
    """Symmetric integer codec with ``bits`` bits, one scale per tensor, stochastic rounding."""

    def __init__(self, bits: int):
        if bits not in (4, 8):
            raise ValueError(f"Int(bits={bits!r}): use 8 or 4.")
        self.bits = bits
        self.name = f"int{bits}"
        self.levels = 2 ** (bits - 1) - 1  # 127 or 7: symmetric, so 0 is exact

    def encode(self, x):
        x = tf.reshape(tf.cast(x, tf.float32), [-1])
        scale = tf.reduce_max(tf.abs(x)) / self.levels
        safe = tf.where(scale > 0, scale, 1.0)
        v = x / safe
        # Stochastic rounding: floor(v + u), u ~ U[0, 1), is v rounded up with probability
        # frac(v): unbiased, which plain rounding of small gradients is not.
        q = tf.floor(v + tf.random.uniform(tf.shape(v)))
        q = tf.clip_by_value(q, -self.levels, self.levels)
        if self.bits == 8:
            return tf.cast(q, tf.int8), scale
        # Two 4-bit values per byte: shift [-7, 7] to [1, 15] (0 pads an odd length).
        n = tf.shape(q)[0]
        u = tf.cast(q + self.levels + 1, tf.uint8)
        u = tf.concat([u, tf.zeros([n % 2], tf.uint8)], 0)
        pairs = tf.reshape(u, [-1, 2])
        packed = tf.bitwise.bitwise_or(tf.bitwise.left_shift(pairs[:, 0], 4), pairs[:, 1])
        return packed, scale

    def decode(self, payload, shape):
        q, scale = payload
        if self.bits == 8:
            v = tf.cast(q, tf.float32)
        else:
            hi = tf.bitwise.right_shift(q, 4)
            lo = tf.bitwise.bitwise_and(q, 15)
            n = tf.reduce_prod(tf.cast(shape, tf.int32))
            u = tf.reshape(tf.stack([hi, lo], 1), [-1])[:n]
            v = tf.cast(u, tf.float32) - (self.levels + 1)
        return tf.reshape(v * scale, shape)

    def payload_bytes(self, num_elements):
        return (num_elements if self.bits == 8 else (num_elements + 1) // 2) + 4

    def __repr__(self):
        return f"Int(bits={self.bits})"


_CODECS = {"fp32": Codec, "fp16": Float16, "int8": lambda: Int(8), "int4": lambda: Int(4)}


def names() -> list[str]:
    return list(_CODECS)


def get(name: str | Codec | None) -> Codec:
    """A codec by name (``fp32``, ``fp16``, ``int8``, ``int4``); ``None`` is ``fp32``."""
    if isinstance(name, Codec):
        return name
    key = {None: "fp32", "none": "fp32", "float32": "fp32", "float16": "fp16",
           "4bit": "int4", "8bit": "int8"}.get(name, name)
    if key not in _CODECS:
        raise ValueError(f"quantize={name!r}: use one of {', '.join(_CODECS)}.")
    return _CODECS[key]()


def compress(codec: Codec, g: tf.Tensor, residual: tf.Tensor):
    """Error feedback: encodes ``g + residual``; returns ``(payload, new_residual)``.

    ``new_residual`` is what the encoding lost; pushing it with the next gradient keeps the
    sum of decoded pushes within one quantization step of the sum of gradients.

    >>> import tensorflow as tf
    >>> codec, r, total, sent = get("int4"), tf.zeros([3]), tf.zeros([3]), tf.zeros([3])
    >>> for _ in range(50):
    ...     g = tf.constant([0.01, -0.5, 1.0])
    ...     payload, r = compress(codec, g, r)
    ...     total, sent = total + g, sent + codec.decode(payload, [3])
    >>> bool(tf.reduce_all(tf.abs(total - sent) <= 1.0 / 7 + 1e-5))
    True
    >>> payload, r = compress(codec, tf.constant([1.0, float("inf"), 0.5]), r)
    >>> bool(tf.reduce_all(tf.math.is_finite(codec.decode(payload, [3])))), r.numpy().tolist()
    (False, [0.0, 0.0, 0.0])
    """
    target = g + residual
    payload = codec.encode(target)
    # A non-finite gradient decodes as non-finite and its residual would be too, poisoning
    # every later push: the push carries it (a LossScaleOptimizer skips that round and
    # lowers its scale; without one the engine stops training), the residual restarts at 0.
    lost = target - codec.decode(payload, tf.shape(target))
    return payload, tf.where(tf.math.is_finite(lost), lost, tf.zeros_like(lost))
