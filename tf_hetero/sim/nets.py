"""The statistical model's networks: the bench's models (:mod:`models`) as numpy, with their
forward pass, mean cross-entropy gradient and the exact gradient noise of a data set
(:class:`~tf_hetero.sim.learner.Learner` trains one).

- :class:`MLP`: ``mlp`` (ReLU layers, logits), on flattened inputs (the offline digits);
- :class:`CNN1D`: ``cnn1d`` (strided 1-D convolutions with TF's ``"same"`` padding, ReLU,
  flatten, logits), on MNIST-1D's signals.

Weights are Glorot-uniform with Keras's fans (a convolution's fan is ``kernel x channels``),
biases zero, drawn from the learner's numpy generator: the same distribution as the bench's
model, not the same numbers. Parameters are one flat float32 vector, layer by layer, each
kernel in Keras's shape (a ``Conv1D`` kernel is ``(kernel, in, out)``).

>>> rng = np.random.default_rng(0)
>>> net = CNN1D((40, 1), 10, rng)
>>> net.size, [s for s in net.shapes[::2]]      # the bench's cnn1d: 7,710 parameters
(7710, [(5, 1, 25), (5, 25, 25), (5, 25, 25), (125, 10)])
>>> x, y = rng.normal(size=(3, 40, 1)).astype(np.float32), np.array([1, 2, 3])
>>> loss, g = net.loss_grad(net.init, x, y)
>>> g.shape, bool(loss > 0)
((7710,), True)
"""

from __future__ import annotations

import numpy as np

__all__ = ["MLP", "CNN1D", "NETS", "build", "check"]


def _glorot(rng, shape, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape)


def _softmax_delta(logits, y):
    """The mean cross-entropy of ``logits`` against labels ``y``, and its gradient with
    respect to the logits, per example (not divided by the batch)."""
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), y], 1e-30))))
    p[np.arange(len(y)), y] -= 1.0
    return loss, p


class _Net:
    shapes: list
    init: np.ndarray

    @property
    def size(self) -> int:
        return int(self.init.size)

    def layers(self, params) -> list:
        """``params`` (a flat vector) as the layers' kernels and biases, in order (views)."""
        out, i = [], 0
        for shape in self.shapes:
            n = int(np.prod(shape))
            out.append(params[i:i + n].reshape(shape))
            i += n
        return out


class MLP(_Net):
    """The bench's ``mlp``: ``hidden`` ReLU layers, then logits; inputs flattened."""

    def __init__(self, input_shape, classes: int, rng, hidden=(128, 64)):
        sizes = [int(np.prod(input_shape)), *hidden, classes]
        self.shapes, parts = [], []
        for a, b in zip(sizes[:-1], sizes[1:]):
            parts += [_glorot(rng, (a, b), a, b), np.zeros(b)]
            self.shapes += [(a, b), (b,)]
        self.init = np.concatenate([p.ravel() for p in parts]).astype(np.float32)

    @staticmethod
    def inputs(x) -> np.ndarray:
        return x.reshape(len(x), -1)

    def _forward(self, layers, x) -> list:
        acts = [x]
        for i in range(0, len(layers) - 2, 2):
            acts.append(np.maximum(acts[-1] @ layers[i] + layers[i + 1], 0.0))
        return acts

    def logits(self, params, x):
        layers = self.layers(params)
        return self._forward(layers, x)[-1] @ layers[-2] + layers[-1]

    def loss_grad(self, params, x, y):
        """The batch's mean loss and the gradient of it (flat float32)."""
        layers = self.layers(params)
        acts = self._forward(layers, x)
        loss, p = _softmax_delta(acts[-1] @ layers[-2] + layers[-1], y)
        delta = p / len(y)
        grads = []
        for i in range(len(layers) - 2, -1, -2):
            grads += [delta.sum(axis=0), acts[i // 2].T @ delta]
            if i:
                delta = (delta @ layers[i].T) * (acts[i // 2] > 0)
        return loss, np.concatenate([g.ravel() for g in reversed(grads)]).astype(np.float32)

    def exact_noise(self, params, x, y) -> tuple[float, float]:
        """``(tr(S), |G|^2)`` over ``(x, y)``: each example's squared gradient norm is the sum
        over layers of ``|input|^2 |delta|^2 + |delta|^2`` (no gradient stored per example)."""
        layers = self.layers(params)
        acts = self._forward(layers, x)
        _, p = _softmax_delta(acts[-1] @ layers[-2] + layers[-1], y)
        delta, per_sample, mean = p, np.zeros(len(y)), []
        for i in range(len(layers) - 2, -1, -2):
            a = acts[i // 2]
            per_sample += (np.sum(a * a, axis=1) + 1.0) * np.sum(delta * delta, axis=1)
            mean += [delta.mean(axis=0), a.T @ delta / len(y)]
            if i:
                delta = (delta @ layers[i].T) * (acts[i // 2] > 0)
        signal = float(sum(np.sum(m * m) for m in mean))
        return float(per_sample.mean()) - signal, signal


class CNN1D(_Net):
    """The bench's ``cnn1d``: per entry of ``filters`` a ``Conv1D(f, kernel, strides=2,
    padding="same", activation="relu")``, then flatten and logits."""

    def __init__(self, input_shape, classes: int, rng, filters=(25, 25, 25), kernel: int = 5,
                 stride: int = 2):
        length, channels = int(input_shape[0]), int(input_shape[1])
        self.kernel, self.stride = kernel, stride
        self.shapes, parts, self._convs = [], [], []
        for f in filters:
            out = -(-length // stride)
            pad = max((out - 1) * stride + kernel - length, 0)  # TF's "same"
            self._convs.append((length, out, pad // 2, pad - pad // 2,
                                stride * np.arange(out)[:, None] + np.arange(kernel)[None, :]))
            parts += [_glorot(rng, (kernel, channels, f), kernel * channels, kernel * f),
                      np.zeros(f)]
            self.shapes += [(kernel, channels, f), (f,)]
            length, channels = out, f
        flat = length * channels
        parts += [_glorot(rng, (flat, classes), flat, classes), np.zeros(classes)]
        self.shapes += [(flat, classes), (classes,)]
        self.init = np.concatenate([p.ravel() for p in parts]).astype(np.float32)

    @staticmethod
    def inputs(x) -> np.ndarray:
        return x if x.ndim == 3 else x[..., None]

    def _forward(self, layers, x):
        """Each convolution's input patches ``(B, out, kernel * in)`` and output, then the
        logits."""
        h, cache = x, []
        for (length, out, left, right, idx), w, b in zip(self._convs, layers[0::2], layers[1::2]):
            padded = np.pad(h, ((0, 0), (left, right), (0, 0)))
            patches = padded[:, idx, :].reshape(len(h), out, -1)
            h = np.maximum(patches @ w.reshape(-1, w.shape[-1]) + b, 0.0)
            cache.append((patches, h))
        flat = h.reshape(len(h), -1)  # Keras's Flatten: position-major, channel-minor
        return cache, flat, flat @ layers[-2] + layers[-1]

    def logits(self, params, x):
        return self._forward(self.layers(params), x)[2]

    def _backward(self, layers, x, cache, flat, delta):
        """Gradients (each layer's kernel and bias, in order) of ``sum(delta * logits)``."""
        grads = [flat.T @ delta, delta.sum(axis=0)]
        dh = (delta @ layers[-2].T).reshape(cache[-1][1].shape)
        for i in range(len(self._convs) - 1, -1, -1):
            (length, out, left, _, _), (patches, h) = self._convs[i], cache[i]
            w = layers[2 * i]
            dz = dh * (h > 0)
            grads[:0] = [(patches.reshape(-1, patches.shape[-1]).T
                          @ dz.reshape(-1, dz.shape[-1])).reshape(w.shape),
                         dz.sum(axis=(0, 1))]
            if i:
                dpatches = (dz @ w.reshape(-1, w.shape[-1]).T).reshape(len(x), out,
                                                                      self.kernel, -1)
                dpad = np.zeros((len(x), length + self.kernel, dpatches.shape[-1]), dh.dtype)
                for j in range(self.kernel):  # one kernel tap: distinct positions
                    dpad[:, j:j + self.stride * out:self.stride] += dpatches[:, :, j]
                dh = dpad[:, left:left + length]
        return grads

    def loss_grad(self, params, x, y):
        """The batch's mean loss and the gradient of it (flat float32)."""
        layers = self.layers(params)
        cache, flat, logits = self._forward(layers, x)
        loss, p = _softmax_delta(logits, y)
        grads = self._backward(layers, x, cache, flat, p / len(y))
        return loss, np.concatenate([g.ravel() for g in grads]).astype(np.float32)

    def exact_noise(self, params, x, y, chunk: int = 250) -> tuple[float, float]:
        """``(tr(S), |G|^2)`` over ``(x, y)``: each example's gradient formed (a chunk at a
        time; the kernels are shared across positions, so no product form as the MLP's)."""
        layers = self.layers(params)
        total, sq = np.zeros(self.size), 0.0
        for s in range(0, len(y), chunk):
            xs, ys = x[s:s + chunk], y[s:s + chunk]
            cache, flat, logits = self._forward(layers, xs)
            _, p = _softmax_delta(logits, ys)
            for k in range(len(ys)):  # per example: its own backward pass
                one = [c[k:k + 1] for c in (flat, p)]
                g = self._backward(layers, xs[k:k + 1], [(pt[k:k + 1], h[k:k + 1])
                                                          for pt, h in cache], *one)
                v = np.concatenate([gi.ravel() for gi in g])
                total += v
                sq += float(v @ v)
        mean = total / len(y)
        signal = float(mean @ mean)
        return sq / len(y) - signal, signal


#: (model, dataset) -> the network the learner trains.
NETS = {("mlp", "digits"): MLP, ("mlp", "mnist1d"): MLP, ("cnn1d", "mnist1d"): CNN1D}


def check(model: str, dataset: str) -> None:
    """Raises the error that says what to do unless the learner has ``model`` on ``dataset``.

    >>> check("cnn", "digits")
    Traceback (most recent call last):
    ...
    ValueError: the simulator's statistical model has no 'cnn' on 'digits'; it has mlp on digits, mlp on mnist1d, cnn1d on mnist1d. Fix: one of those (--model / --dataset), or run without the statistical model (--throughput-only).
    """
    if (model, dataset) not in NETS:
        raise ValueError(
            f"the simulator's statistical model has no {model!r} on {dataset!r}; it has "
            f"{', '.join(f'{m} on {d}' for m, d in NETS)}. Fix: one of those "
            "(--model / --dataset), or run without the statistical model (--throughput-only).")


def build(model: str, dataset: str, input_shape, classes: int, rng, **kwargs):
    """The network of the bench's ``model`` on ``dataset`` (``kwargs``: its sizes)."""
    check(model, dataset)
    return NETS[(model, dataset)](input_shape, classes, rng, **kwargs)
