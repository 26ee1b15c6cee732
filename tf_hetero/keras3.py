"""Keras 3 ``model.fit`` on a parameter-server cluster: switch it on once per process.

>>> import tf_hetero
>>> tf_hetero.keras3.enable()        # doctest: +SKIP
>>> tf_hetero.keras3.enabled()       # doctest: +SKIP
True

After :func:`enable`, a Keras 3 model built and compiled under
``tf.distribute.ParameterServerStrategy(...).scope()`` trains with plain
``model.fit(dataset_or_dataset_fn, epochs=..., steps_per_epoch=...)`` on the cluster's
workers, asynchronously, and ``evaluate(..., steps=...)`` and ``predict`` run there too;
what cannot run there is refused before the first step, in one line naming the setting and
the fix. Models trained without a parameter-server strategy keep Keras's own loops.
What works, how, and what is refused: docs/KERAS3.md.
"""

from __future__ import annotations

__all__ = ["enable", "enabled"]


def enable() -> None:
    """Routes Keras 3 ``fit``/``evaluate``/``predict`` of models under a
    parameter-server strategy to the workers, and makes Keras 3 variables' ``assign_add``
    atomic on a parameter server. Idempotent; call it before ``fit``."""
    from tf_hetero.strategies.runtime import keras3

    keras3.install()


def enabled() -> bool:
    """Has :func:`enable` run in this process?"""
    from tf_hetero.strategies.runtime import keras3

    return keras3.installed()
