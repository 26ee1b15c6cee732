"""The bench's accuracy sampler (``tf_hetero/tools/benchrow.py``): while fit runs it only reads
the model's weights; it evaluates them on the twin after the fit."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)


def _model():
    import tf_keras as keras

    return keras.Sequential([keras.layers.Dense(2, input_shape=(1,), use_bias=False)])


def _until(condition, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the sampler read nothing within the bound"
        time.sleep(0.01)


def test_the_sampler_reads_weights_while_fit_runs_and_evaluates_them_after():
    from tf_hetero.tools.sampler import AccuracySampler

    trained, twin = _model(), _model()
    x, y = np.ones((4, 1), np.float32), np.zeros(4, np.int64)
    class_0, class_1 = np.array([[1.0, 0.0]], np.float32), np.array([[0.0, 1.0]], np.float32)
    sampler = AccuracySampler(trained, twin, x, y, interval=0.01)
    evaluated = []
    evaluate = sampler.accuracy
    sampler.accuracy = lambda weights: evaluated.append(weights) or evaluate(weights)

    trained.set_weights([class_0])  # every test row right: accuracy 1
    sampler.start(time.perf_counter())
    _until(lambda: len(sampler._weights) >= 2)
    trained.set_weights([class_1])  # every one wrong: 0
    read = len(sampler._weights)
    _until(lambda: len(sampler._weights) >= read + 3)
    sampler.stop()

    assert evaluated == [] and sampler.samples == []  # nothing evaluated while fit ran
    assert sampler.finish() == 0.0  # the final weights, read after the fit
    accuracies = [a for _, a in sampler.samples]
    assert len(evaluated) == len(accuracies) >= 6
    assert accuracies[:2] == [1.0, 1.0] and accuracies[-3:] == [0.0, 0.0, 0.0]
    times = [t for t, _ in sampler.samples]
    assert times == sorted(times) and sampler.failures == []
    # The twin holds the last weights it evaluated; the trained model is untouched.
    np.testing.assert_array_equal(trained.get_weights()[0], class_1)


def test_the_weights_kept_are_bounded_and_the_sampler_says_when_it_thins_them(capsys):
    from tf_hetero.tools.sampler import AccuracySampler

    trained = _model()
    sampler = AccuracySampler(trained, _model(), np.ones((4, 1), np.float32),
                               np.zeros(4, np.int64), interval=0.01)
    sampler.MAX_BYTES = 5 * 8  # a sample holds 2 float32 (8 bytes): the sixth one thins
    sampler.start(time.perf_counter())
    _until(lambda: sampler.interval > 0.01)
    sampler.stop()
    assert sampler._bytes <= sampler.MAX_BYTES and sampler.interval >= 0.02
    assert "every other sample dropped, one every 0.02 s" in capsys.readouterr().out
    sampler.finish()  # at most 5 kept, and the final weights
    times = [t for t, _ in sampler.samples]
    assert 4 <= len(times) <= 6 and times == sorted(times)
