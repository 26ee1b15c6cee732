"""The statistical model: real SGD on a small numpy MLP, so a simulated run has an accuracy
curve and a time to target, not only a throughput.

Each simulated step computes its gradient on the parameters its worker *read* when the step
started (so staleness, book groups and late folds act on the model exactly as the engine
scheduled them), on its own worker's shard of the training data. Gradients then take the
path the real runtime gives them (:mod:`tf_hetero.strategies.runtime.accumulate`,
``local_push``): an async step applies its own at its end; a round step writes
``acc[lane, slot]`` tagged with its round (a fresh tag overwrites, the same tag adds), or
its worker's local buffer (H-PS), which a push moves to the lane; an apply takes the
weighted mean ``sum(w * acc) / sum(w * count)`` over the lanes and folds the engine names,
counting a lane only if its tag is the round expected. The optimizer is SGD with momentum
(tf_keras' rule: ``v = m v - lr g; x += v``). Quantized pushes are applied unquantized.

The model is one of the bench's (:mod:`tf_hetero.sim.nets`): ``mlp`` (ReLU layers 128 and
64) on the offline digits, or ``cnn1d`` (three strided 1-D convolutions) on MNIST-1D (both
offline, :func:`tf_hetero.data.load`); Glorot-uniform weights, zero biases. Worker ``w``
reads examples ``w, w + N, ...`` (TF's ``shard``; ``per_worker="reshuffle"``, the bench's
default: all of them), reshuffled each pass, sampled with replacement when its shard is
smaller than a batch (a cluster larger than the data set).

>>> m = Learner(num_workers=2, batch_size=32, lr=0.1, seed=0)
>>> before = m.accuracy()
>>> for _ in range(30):
...     m.apply_async(m.gradient(m.params, worker=0, rows=32))
>>> m.accuracy() > before + 0.3
True
"""

from __future__ import annotations

import functools
import math

import numpy as np

from tf_hetero.policies.noise import GradientSample

__all__ = ["Learner"]


def _diverging_quietly(method):
    """Runs ``method`` without numpy's overflow warnings: a diverging run (a sweep does not
    stop one) overflows to inf and NaN, which its accuracy and the engine's divergence guard
    report; a warning per overflowing array would only repeat it in the output."""
    @functools.wraps(method)
    def quiet(*args, **kwargs):
        with np.errstate(over="ignore", invalid="ignore"):
            return method(*args, **kwargs)
    return quiet


class Learner:
    """Parameters, data shards, optimizer state and the PS accumulators of one run. ``lr``:
    the learning rate, or a function of the update count (a warm-up)."""

    def __init__(self, num_workers: int, batch_size: int, lr, momentum: float = 0.9,
                 hidden=(128, 64), seed: int = 0, dataset: str = "digits",
                 model: str | None = None, per_worker: str = "shard"):
        from tf_hetero import data
        from tf_hetero.sim import nets

        model = model or ("cnn1d" if dataset == "mnist1d" else "mlp")
        nets.check(model, dataset)
        data.check_per_worker(per_worker)
        train, test = data.load(dataset, "train"), data.load(dataset, "test")
        classes = int(train.y.max()) + 1
        self.net = nets.build(model, dataset, train.x.shape[1:], classes,
                              np.random.default_rng(seed),
                              **({"hidden": hidden} if model == "mlp" else {}))
        self.x = self.net.inputs(train.x.astype(np.float32))
        self.y = train.y
        self.x_test = self.net.inputs(test.x.astype(np.float32))
        self.y_test = test.y
        self.params = self.net.init
        self.velocity = np.zeros_like(self.params)
        self.lr, self.momentum, self.batch_size = lr, momentum, batch_size
        self.num_workers = num_workers
        self._rng = np.random.default_rng(seed + 1)
        # TF's shard (worker w reads w, w + N, ...), or the bench's default: every worker all
        # of it, in its own order (tf_hetero.data.dataset_fn's per_worker).
        self._shards = [np.arange(w, len(self.y), num_workers) if per_worker == "shard"
                        else np.arange(len(self.y)) for w in range(num_workers)]
        self._order = [np.empty(0, np.int64) for _ in range(num_workers)]
        self.acc: dict = {}  # (lane, slot) -> [round tag, gradient sum, count]
        self.buffer: dict = {}  # worker -> [gradient sum, count] (H-PS local buffers)
        self.updates = 0
        #: The mean loss of the batch the last :meth:`gradient` read.
        self.batch_loss = math.nan
        self.curve: list = []  # (virtual seconds, held-out accuracy), see watch()
        self._clock, self._interval, self._next = None, None, 0.0

    def watch(self, clock, interval_s: float) -> None:
        """Samples held-out accuracy every ``interval_s`` of ``clock`` (as the bench's
        sampler does while ``fit`` runs), into :attr:`curve`; :meth:`sample` catches up."""
        self._clock, self._interval, self._next, self.curve = clock, interval_s, interval_s, []

    def sample(self, until: float) -> None:
        """Accuracy samples due up to ``until`` (the parameters only change at updates, so
        sampling just before each update is exact)."""
        while self._clock is not None and self._next <= until:
            self.curve.append((self._next, self.accuracy()))
            self._next += self._interval

    @property
    def param_bytes(self) -> int:
        return int(self.params.size * 4)

    # ------------------------------------------------------------------- the model
    def layers(self, params) -> list:
        """``params`` (a flat vector, e.g. :attr:`params`) as the model's kernels and bias
        vectors, in order: ``[w1, b1, w2, b2, ...]`` (views, not copies)."""
        return self.net.layers(params)

    def _batch(self, worker: int, rows: int):
        shard = self._shards[worker]
        if len(shard) < rows:  # more workers than the data set feeds: sample
            idx = shard[self._rng.integers(0, len(shard), rows)]
        else:
            order = self._order[worker]
            while len(order) < rows:  # a new pass over the shard, reshuffled
                order = np.concatenate([order, self._rng.permutation(shard)])
            idx, self._order[worker] = order[:rows], order[rows:]
        return self.x[idx], self.y[idx]

    @_diverging_quietly
    def gradient(self, params, worker: int, rows: int) -> np.ndarray:
        """Mean cross-entropy gradient of a batch of ``rows`` of ``worker``'s shard at
        ``params`` (what the step read); its mean loss is left in :attr:`batch_loss`."""
        x, y = self._batch(worker, int(rows))
        self.batch_loss, g = self.net.loss_grad(params, x, y)
        return g

    def exact_noise(self, params=None) -> tuple[float, float]:
        """``(tr(S), |G|^2)`` at ``params`` (default :attr:`params`) over the whole training
        set: the trace of one sample's gradient covariance and the squared norm of the
        full-data gradient, computed exactly. What
        :class:`~tf_hetero.policies.noise.GradientNoise` estimates."""
        return self.net.exact_noise(self.params if params is None else params, self.x, self.y)

    @_diverging_quietly
    def accuracy(self) -> float:
        logits = self.net.logits(self.params, self.x_test)
        return float(np.mean(np.argmax(logits, axis=1) == self.y_test))

    def _step(self, g: np.ndarray, lr: float) -> None:
        if self._clock is not None:
            self.sample(self._clock())
        lr = lr(self.updates) if callable(lr) else lr
        self.velocity = self.momentum * self.velocity - lr * g
        self.params = self.params + self.velocity  # a new array: a step keeps what it read
        self.updates += 1

    # ------------------------------------------------------------ gradient paths
    @_diverging_quietly
    def apply_async(self, g: np.ndarray) -> None:
        """An async step applies its own gradient at its end (stock PSS, ASP, SSP)."""
        self._step(g, self.lr)

    def write(self, lane: int, slot: int, round_id: int, g_sum, count: int,
              loss_sum: float = math.nan) -> None:
        """A push into ``acc[lane, slot]`` tagged ``round_id`` (a new tag overwrites), with
        its summed loss (loss x count; NaN: none, as the runtime's lane)."""
        held = self.acc.get((lane, slot))
        if held is None or held[0] != round_id:
            self.acc[(lane, slot)] = [round_id, g_sum, count, loss_sum]
        else:
            held[1] = held[1] + g_sum
            held[2] += count
            held[3] += loss_sum

    def hold(self, worker: int, g_sum, count: int) -> None:
        """A step of the H-PS buffer path adds its gradient to its worker's buffer."""
        held = self.buffer.get(worker)
        self.buffer[worker] = [g_sum, count] if held is None else [held[0] + g_sum,
                                                                    held[1] + count]

    def take(self, worker: int):
        """Empties ``worker``'s buffer (a push): ``(gradient sum, count)`` or ``None``."""
        return self.buffer.pop(worker, None)

    @_diverging_quietly
    def apply_round(self, round_id: int, slot: int, lanes, folds,
                    scale: float = 1.0, max_norm: float = 0.0, velocity: float = 1.0
                    ) -> tuple[int, float, GradientSample]:
        """One round's apply (its mean gradient times ``scale``, the round's update scale,
        scaled down to a norm of ``max_norm`` before the scale when positive, the velocity
        scaled by ``velocity`` first when below 1, as the runtime's):
        returns (micro-batches applied, norm of the mean gradient, what the runtime's apply
        measures of the gradient's noise: its own lanes' :class:`GradientSample`)."""
        weights = {(lane, slot): (round_id, 1.0) for lane in lanes}
        weights.update({key: (late, w) for key, (late, w) in folds.items()})
        total, n, applied = None, 0.0, 0
        for key, (expected, w) in weights.items():
            held = self.acc.get(key)
            if held is None or held[0] != expected or w <= 0:
                continue
            total = w * held[1] if total is None else total + w * held[1]
            n += w * held[2]
            applied += held[2]
        if total is None:
            return 0, 0.0, None
        own = [self.acc[(lane, slot)] for lane in lanes
               if self.acc.get((lane, slot)) is not None
               and self.acc[(lane, slot)][0] == round_id and self.acc[(lane, slot)][2] > 0]
        units = sum(h[2] for h in own)
        mean = sum(h[1] for h in own) / max(units, 1e-6) if own else np.zeros(1)
        sample = GradientSample(units, len(own), float(mean @ mean),
                                sum(float(h[1] @ h[1]) / h[2] for h in own),
                                sum(h[3] for h in own) / max(units, 1e-6))
        g = total / max(n, 1e-6) * scale
        norm = float(np.linalg.norm(g))
        if not np.isfinite(norm):
            g = np.zeros_like(g)  # as the runtime: applied as zeros, the engine stops
        elif max_norm > 0 and norm > max_norm * scale:
            g = g * (max_norm * scale / norm)
        if velocity < 1.0:
            self.velocity = self.velocity * velocity
        self._step(g, self.lr)
        return applied, norm, sample
