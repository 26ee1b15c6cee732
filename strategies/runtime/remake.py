"""tf_keras's test and predict functions made again after a variable moved to another PS.

Functions traced before a move (measured, ``tests/strategies/test_rebalance.py``):
a ``tf.function`` of the user's, called on the chief or scheduled on the workers, reads the
moved variable where it is now; tf_keras's test and predict functions do not: their
concrete functions hold the old inner variable's handle among their captured inputs, and
``evaluate``, ``predict`` and ``fit``'s validation after a move read the value the variable
had when it moved. So tf_keras makes them again once the placement changed (:func:`install`,
the strategy's ``placement_generation``, which every move raises).
"""

from __future__ import annotations

from tf_hetero.patching import wrap_once
from tf_hetero.tfcompat import variables as tfvars

__all__ = ["install"]


def install() -> None:
    """Wraps tf_keras's ``Model.make_test_function`` and ``make_predict_function`` (once per
    process) so that a model's cached function is made again when its strategy's
    ``placement_generation`` changed since it was made: made before a move, it reads the
    moved variable's old copy (``evaluate``, ``predict``, and ``fit``'s validation, whose
    test function the first epoch made)."""
    import tf_keras

    for name in ("make_test_function", "make_predict_function"):
        wrap_once(tf_keras.Model, name, _remade_after_moves)


def _remade_after_moves(original):
    def make(self, force=False):
        generation = getattr(tfvars.model_variables_strategy(self), "placement_generation", 0)
        made = self.__dict__.setdefault("_tf_hetero_generations", {})
        if made.get(original.__name__, 0) != generation:
            force = True
        function = original(self, force=force)
        made[original.__name__] = generation
        return function

    return make
