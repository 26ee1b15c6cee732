"""The translation of what tf_keras's ``fit`` raises under a tf-hetero strategy
(strategies.runtime.errors), on stand-ins for the model and strategy: the cluster paths are
in tests/strategies/test_dropin.py."""
from __future__ import annotations

import pytest

from support import LazyModule

tf = LazyModule("tensorflow")
fitplan = LazyModule("tf_hetero.strategies.runtime.fitplan")

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)


def _model(ours: bool = True):
    """A model whose strategy (tf-hetero's, or not) has a coordinator counting the ends of
    the data that reached the user, as ``HeteroCoordinator.data_ran_out`` does."""
    strategy = type("Strategy", (), {})()
    if ours:
        strategy.fit_state = fitplan.FitState()
    strategy._cluster_coordinator = type("Coordinator", (), {"data_ran_out": 0})()
    model = type("Model", (), {"built": False})()
    model._distribution_strategy = strategy
    return model


def _keras_method(name: str, runs_out: bool):
    """A stand-in for tf_keras's ``name``: when ``runs_out``, Keras caught the end of the data
    (the coordinator counted it) and returned as if the fit had finished."""
    def method(self):
        if runs_out:
            self._distribution_strategy._cluster_coordinator.data_ran_out += 1
        return "history"
    method.__name__ = name
    from tf_hetero.strategies.runtime.errors import _translating

    return _translating(method)


def test_a_fit_keras_ended_early_at_the_end_of_the_data_raises_once_it_returns():
    """Keras ends a fit early when a worker's data runs out and, if the step whose logs it
    fetched had run, returns normally with a warning: under a tf-hetero strategy the fit
    raises the end of the data, with the fix, whichever step Keras fetched."""
    with pytest.raises(tf.errors.OutOfRangeError,
                       match=r"training data ran out during this fit.*Fix: end the dataset "
                             r"with \.repeat\(\)"):
        _keras_method("fit", runs_out=True)(_model())
    assert _keras_method("fit", runs_out=False)(_model()) == "history"
    # evaluate and predict are Keras's to end (they take steps=); stock strategies untouched.
    assert _keras_method("evaluate", runs_out=True)(_model()) == "history"
    assert _keras_method("fit", runs_out=True)(_model(ours=False)) == "history"
