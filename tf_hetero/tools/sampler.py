"""The bench's held-out accuracy over a fit (:class:`AccuracySampler`): weights read from the
chief every ``eval_interval_s`` while the fit runs, evaluated after it, so the meter stays out
of what it measures (docs/MEASUREMENT.md). One per row of ``tf-hetero bench``
(:mod:`tf_hetero.tools.benchrow`).

TensorFlow is imported by the first read, not by importing this module.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from tf_hetero import tfcompat

__all__ = ["AccuracySampler"]


class AccuracySampler:
    """Held-out accuracy over a fit, sampled every ``interval`` s from the chief.

    While fit runs, a sample only *reads* the model's weights (one function: one exchange
    with each PS task); the samples are evaluated after the fit, on ``twin`` (the same
    architecture, built outside the strategy, on the chief). Evaluating while training ran a
    forward pass of the whole test set on the chief at every sample, CPU and the GIL taken
    from whatever step or round it met (docs/MEASUREMENT.md, Rules: "The meter stays out of
    the measured"). The weights kept are bounded (:attr:`MAX_BYTES`)."""

    #: Bytes of weights kept for the evaluation after the fit, at most: past it every other
    #: sample is dropped and the rest of the fit is sampled half as often (said in a line).
    MAX_BYTES = 256 * 2**20

    def __init__(self, model, twin, x, y, interval: float):
        self.model, self.twin, self.x, self.y, self.interval = model, twin, x, y, interval
        self.samples: list[tuple[float, float]] = []
        self.failures: list[str] = []  # reads or evaluations that raised (reported)
        self._weights: list[tuple[float, list]] = []
        self._bytes = 0
        self._read_fn = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tf-hetero-eval")

    def read(self) -> list:
        """The model's weights now, as arrays, in ``model.weights`` order."""
        if self._read_fn is None:
            import tensorflow as tf

            variables = [tfcompat.keras3.tf_variable(v) for v in self.model.weights]
            self._read_fn = tf.function(lambda: [v.read_value() for v in variables])
        return [t.numpy() for t in self._read_fn()]

    def accuracy(self, weights: list) -> float:
        self.twin.set_weights(weights)
        logits = np.asarray(self.twin(self.x, training=False))
        return float(np.mean(np.argmax(logits, axis=1) == self.y))

    def start(self, t0: float):
        self.t0 = t0
        self._thread.start()

    def _loop(self):
        while not self._stop.wait(self.interval):
            try:
                weights = self.read()
            except Exception as e:  # pylint: disable=broad-except
                self._failed(e)
                continue
            self._weights.append((time.perf_counter() - self.t0, weights))
            self._bytes += sum(w.nbytes for w in weights)
            if self._bytes > self.MAX_BYTES:
                self._thin()

    def _thin(self) -> None:
        self._weights = self._weights[::2]
        self._bytes = sum(w.nbytes for _, ws in self._weights for w in ws)
        self.interval *= 2
        print(f"[tf-hetero bench] the accuracy sampler holds {self.MAX_BYTES >> 20} MiB of "
              f"weights: every other sample dropped, one every {self.interval:g} s from now",
              flush=True)

    def _failed(self, e: BaseException) -> None:
        self.failures.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=30)

    def finish(self) -> float:
        """After :meth:`stop`: every sample evaluated into ``samples``, then the weights
        as the fit left them; returns their accuracy (what fails there is the row's error)."""
        end, final = time.perf_counter() - self.t0, self.read()
        for t, weights in self._weights:
            try:
                self.samples.append((t, self.accuracy(weights)))
            except Exception as e:  # pylint: disable=broad-except
                self._failed(e)
        self._weights, self._bytes = [], 0
        accuracy = self.accuracy(final)
        self.samples.append((end, accuracy))
        return accuracy
