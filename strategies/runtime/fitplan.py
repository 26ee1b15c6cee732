"""The line a round strategy prints when a ``fit`` starts: how many updates it will make.

Under a round strategy one update applies a whole round (one task per worker, each of
``steps_per_execution`` steps), so the TF tutorial's ``fit(epochs=5, steps_per_epoch=20)``
with ``steps_per_execution=10`` on 2 workers makes 5 updates, not 100;
``optimizer.iterations`` counts those updates (a checkpoint-resume recipe that divides it by
``steps_per_epoch`` resumes at the wrong epoch), and the learning rate must suit a round's
batch. Stock PSS users expect none of this, so the strategy says it once per fit, before the
first step.

tf_keras builds a data handler per ``fit``/``evaluate`` (``data_adapter.get_data_handler``);
:func:`install` wraps it to note the handler's steps and epochs on a tf-hetero strategy, and
the coordinator prints :func:`plan_line` at the first training step scheduled after that
(``evaluate`` schedules no training step, so its handler is replaced before use).

>>> plan_line("BSPStrategy", steps=100, epochs=5, per_epoch=20, per_execution=10,
...           workers=2, groups=1)  # doctest: +NORMALIZE_WHITESPACE
'[tf-hetero] BSPStrategy: this fit runs 100 steps as 10 tasks and applies ~5 updates, one per
 round of 2 tasks (20 steps, 20 batches averaged). optimizer.iterations counts updates
 (resume at epoch iterations x 20 // 20); learning rate: scale a one-batch rate by 20
 (linear rule), or warm up to it.'
>>> plan_line("SSPStrategy", steps=40, epochs=1, per_epoch=40, per_execution=1,
...           workers=4, groups=4)  # doctest: +NORMALIZE_WHITESPACE
'[tf-hetero] SSPStrategy: this fit runs 40 steps and applies ~40 updates, one per step (the
 steps of every worker applied one by one, on the chief). optimizer.iterations counts updates
 (resume at epoch iterations // 40); learning rate: the one-batch rate.'
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import weakref
from typing import Any

from tf_hetero import tfcompat
from tf_hetero.policies.lr import linear_advice

__all__ = ["FitState", "state_of", "counted", "fit_model", "fits_handler", "install", "plan_line",
           "note_plan", "note_fit", "take_plan"]


@dataclasses.dataclass
class FitState:
    """What tf-hetero's wraps of tf_keras note on a tf-hetero strategy (its ``fit_state``;
    a strategy without one is not tf-hetero's and is left alone)."""

    #: The fit that is starting: its steps, epochs, steps per epoch and per execution
    #: (:func:`note_plan`), taken by its first training task (:func:`take_plan`).
    plan: dict | None = None
    #: That fit's model (a weak reference), for rebalancing's decision 0 (:func:`fit_model`).
    model: Any = None
    #: > 0 while datasets this strategy distributes stay in whole batches
    #: (:func:`~tf_hetero.strategies.runtime.granules.whole_batches`).
    whole_batches: int = 0
    #: > 0 while the datasets this strategy distributes are pipelines tf_keras built from
    #: arrays or tensors: autotuning off (:mod:`~tf_hetero.strategies.runtime.arrays`).
    keras_pipeline: int = 0


def state_of(strategy) -> FitState | None:
    """The :class:`FitState` of a tf-hetero strategy, ``None`` for any other."""
    state = getattr(strategy, "fit_state", None)
    return state if isinstance(state, FitState) else None


@contextlib.contextmanager
def counted(strategy, field: str):
    """Raises the strategy's :class:`FitState` counter ``field`` for the block (nested
    blocks count)."""
    state = state_of(strategy)
    setattr(state, field, getattr(state, field) + 1)
    try:
        yield
    finally:
        setattr(state, field, getattr(state, field) - 1)


def plan_line(who: str, *, steps: int, epochs: int, per_epoch: int, per_execution: int,
              workers: int, groups: int = 1, round_steps: float | None = None) -> str:
    """The fit-start line (``groups``: groups of workers with their own rounds;
    ``round_steps``: the tasks' worth of steps a sized round covers, its global batch in
    dataset batches, whoever runs it; default one per worker).

    >>> plan_line("HPSStrategy", steps=96, epochs=1, per_epoch=96, per_execution=1,
    ...           workers=4, round_steps=8).split(" (8 steps")[0]
    '[tf-hetero] HPSStrategy: this fit runs 96 steps as 96 tasks and applies ~12 updates, one per round of 4 sized tasks'
    """
    tasks = math.ceil(steps / per_execution)
    per_round = max(1.0, workers / max(1, groups))  # tasks in one round (mean group size)
    if round_steps is not None:
        per_round = float(round_steps)
    updates = math.ceil(tasks / per_round)
    batches = per_round * per_execution
    if batches == 1:  # one-task rounds (SSP, DynSGD): every step is an update of its own
        return (f"[tf-hetero] {who}: this fit runs {steps} steps and applies ~{updates} "
                f"updates, one per step (the steps of every worker applied one by one, on the "
                f"chief). optimizer.iterations counts updates (resume at epoch iterations "
                f"// {per_epoch}); learning rate: {linear_advice(1)}.")
    if round_steps is not None:  # sized: the workers split the round's batches
        size = f"round of {workers} sized tasks"
    elif groups == 1:
        size = f"round of {per_round:g} tasks"
    else:
        size = f"round of a group ({groups} groups of ~{per_round:g} tasks)"
    return (f"[tf-hetero] {who}: this fit runs {steps} steps as {tasks} tasks and applies "
            f"~{updates} updates, one per {size} ({batches:g} steps, {batches:g} batches "
            f"averaged). optimizer.iterations counts updates (resume at epoch iterations x "
            f"{batches:g} // {per_epoch}); learning rate: {linear_advice(batches)}.")


def note_plan(strategy, handler) -> None:
    """Keeps what ``handler`` (a tf_keras data handler) will run, for the next fit's line."""
    plan = tfcompat.keras.handler_plan(handler)
    if plan is None:
        return  # an unknown epoch length (a dataset without steps_per_epoch): no line
    note_fit(strategy, *plan)


def note_fit(strategy, per_epoch: int, epochs: int, per_execution: int, model=None) -> None:
    """Keeps a starting fit's plan (and its ``model``) for its first training task: the
    fit-start line, :meth:`HeteroStrategy.fit_starts`. tf_keras's fits are noted from their
    data handler (:func:`install`); the Keras 3 loop (``runtime/keras3/loop.py``) calls this
    itself."""
    state = state_of(strategy)
    state.plan = dict(steps=per_epoch * epochs, epochs=epochs, per_epoch=per_epoch,
                      per_execution=max(1, per_execution))
    if model is not None:
        state.model = weakref.ref(model)


def take_plan(strategy):
    """The plan noted for ``strategy``'s next fit (once), or ``None``. Called at each training
    task: the fit's model noted with it (:func:`fit_model`) is forgotten too."""
    state = state_of(strategy)
    if state is None:
        return None
    plan, state.plan, state.model = state.plan, None, None
    return plan


def fit_model(strategy):
    """The model of the fit that is starting on ``strategy`` (its data handler made, its first
    training task not yet scheduled), or ``None``.

    >>> import types, weakref
    >>> class Model: ...
    >>> model = Model()
    >>> strategy = types.SimpleNamespace(fit_state=FitState({"steps": 4}, weakref.ref(model)))
    >>> fit_model(strategy) is model, take_plan(strategy), fit_model(strategy)
    (True, {'steps': 4}, None)
    """
    state = state_of(strategy)
    ref = state.model if state is not None else None
    return ref() if ref is not None else None


def fits_handler(kwargs) -> bool:
    """Is a ``get_data_handler`` call with these keyword arguments fit's own (its training
    data)? Only fit passes ``shuffle=`` (tf_keras ``training.py``): the handlers of
    ``evaluate``, ``predict`` and fit's validation are made without it.

    >>> fits_handler({"shuffle": True, "epochs": 2}), fits_handler({"epochs": 1})
    (True, False)
    """
    return "shuffle" in kwargs


def install() -> None:
    """Wraps tf_keras's ``get_data_handler`` (once per process) so that a handler built for
    a model under a tf-hetero strategy notes its plan on the strategy."""
    tfcompat.keras.wrap_data_handler(_noting_data_handler)


def _noting_data_handler(original):
    def get_data_handler(*args, **kwargs):
        handler = original(*args, **kwargs)
        model = kwargs.get("model")
        strategy = getattr(model, "distribute_strategy", None)
        if state_of(strategy) is None:
            return handler
        # One read of steps_per_execution (a PS variable), not one per step from fit's
        # thread: after a PS death that read met it first (ASP: the clear error before the
        # failover took a step's failure; docs/FAILOVER.md).
        tfcompat.keras.cache_steps_per_execution(handler)
        # Not the validation handler's plan: the next training task would take it (a second
        # fit line at epoch 2 of a fit with validation_data, its divergence watch reset).
        if fits_handler(kwargs):
            note_plan(strategy, handler)
            # Rebalancing's decision 0 places the model's variables before the first trace.
            state_of(strategy).model = weakref.ref(model)
        return handler

    return get_data_handler
