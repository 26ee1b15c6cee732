"""What a Keras 3 ``fit``/``evaluate``/``predict`` cannot do on a parameter-server cluster,
refused before the first step with one line: the setting, why, and the fix.

Each check raises ``ValueError`` (:class:`Keras3PSError`) whose message starts with
:data:`PREFIX`; none touches the cluster, so a refused call has scheduled nothing.

>>> executions(10, 4)
[4, 4, 2]
>>> check_fit_args(steps_per_epoch=None, verbose="auto")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
tf_hetero...Keras3PSError: tf-hetero (Keras 3 on ParameterServerStrategy): fit(steps_per_epoch=None): ... Fix: pass steps_per_epoch=N, ...
"""

from __future__ import annotations

from tf_hetero import tfcompat

__all__ = ["PREFIX", "Keras3PSError", "executions", "check_strategy",
           "check_fit_args", "check_steps", "check_model", "check_callbacks",
           "check_placement", "check_cardinality", "data_ran_out"]

PREFIX = "tf-hetero (Keras 3 on ParameterServerStrategy)"

#: Callbacks whose batch hooks do nothing while they save once per epoch
#: (``save_freq="epoch"``, their default): they may run without batch hooks.
_EPOCH_SAVERS = ("ModelCheckpoint", "BackupAndRestore")


class Keras3PSError(ValueError):
    """A Keras 3 setting that cannot run on a parameter-server cluster (refused before the
    first step)."""


def _refuse(what: str, fix: str):
    raise Keras3PSError(f"{PREFIX}: {what} Fix: {fix}")


def executions(steps: int, per_execution: int) -> list[int]:
    """The steps each scheduled closure runs for ``steps`` steps, ``per_execution`` at a time:
    the last one is short, so exactly ``steps`` run (Keras's own loop runs whole executions).

    >>> executions(8, 4), executions(3, 1), executions(0, 4)
    ([4, 4], [1, 1, 1], [])
    """
    full, rest = divmod(int(steps), int(per_execution))
    return [int(per_execution)] * full + ([rest] if rest else [])


def check_strategy(strategy) -> None:
    """One device per worker."""
    replicas = int(strategy.num_replicas_in_sync)
    if replicas != 1:
        _refuse(f"workers with several devices each (num_replicas_in_sync={replicas}) are not "
                "supported yet: each step's logs would be per device.",
                "give each worker one device (e.g. CUDA_VISIBLE_DEVICES=0), or use tf_keras.")


def check_fit_args(*, steps_per_epoch, verbose, validation_split=0.0, validation_data=None,
                   validation_steps=None) -> None:
    """``fit``'s arguments a PS cluster needs or cannot honour."""
    if steps_per_epoch is None:
        _refuse("fit(steps_per_epoch=None): each worker reads its own copy of the data, so "
                "the end of the data cannot end an epoch.",
                "pass steps_per_epoch=N, the steps of one epoch summed over all workers.")
    if int(steps_per_epoch) < 1:
        _refuse(f"fit(steps_per_epoch={steps_per_epoch}) runs no step.",
                "pass steps_per_epoch=N with N >= 1.")
    check_verbose(verbose, "fit")
    if validation_split:
        _refuse(f"fit(validation_split={validation_split}) slices arrays on the chief.",
                "pass validation_data=(x_val, y_val) or a dataset, and validation_steps=N.")
    if validation_data is not None and validation_steps is None:
        _refuse("fit(validation_data=..., validation_steps=None): the workers' copies of the "
                "validation data have no shared end.",
                "pass validation_steps=N, the validation steps summed over all workers.")


def check_steps(steps, method: str, verbose) -> None:
    """``evaluate``'s ``steps`` is needed (``predict`` reads to the end of its data on the
    chief, so it needs none)."""
    if method == "evaluate" and steps is None:
        _refuse("evaluate(steps=None): each worker reads its own copy of the data, so the end "
                "of the data cannot end the evaluation.",
                "pass steps=N, the steps summed over all workers.")
    check_verbose(verbose, method)


def check_verbose(verbose, method: str) -> None:
    if verbose == 1:
        _refuse(f"{method}(verbose=1) prints every step's logs, which stay on the workers.",
                "verbose=2 (one line per epoch; what verbose='auto' gives here) or verbose=0.")


def check_model(model, method: str) -> None:
    """Compile settings the workers cannot run."""
    if model.run_eagerly:
        _refuse(f"{method} with run_eagerly=True would run every step in Python on the chief.",
                "compile(..., run_eagerly=False).")
    if method != "predict" and model.jit_compile:
        _refuse(f"{method} with jit_compile=True: XLA cannot reach variables on a parameter "
                "server.", "compile(..., jit_compile=False).")
    optimizer = getattr(model, "optimizer", None)
    steps = getattr(optimizer, "gradient_accumulation_steps", None)
    if method == "fit" and steps:
        _refuse(f"optimizer gradient_accumulation_steps={steps}: the workers' asynchronous "
                "steps would add to one shared accumulator and apply it whenever "
                "optimizer.iterations, counted by all workers together, reaches a multiple.",
                "drop gradient_accumulation_steps (raise the batch size instead).")


def _keras_class(callback, name: str) -> bool:
    """Is ``callback`` Keras's own ``name`` (or a subclass of it)?"""
    return any(c.__name__ == name and c.__module__.startswith("keras")
               for c in type(callback).__mro__)


def _check_tensorboard(callback) -> None:
    """Keras 3's ``TensorBoard`` writes per epoch from its epoch hooks; its batch hooks only
    count batches unless it writes per batch, profiles batches, times steps or writes the
    train graph (at the first batch's end, from a ``tf.function`` the PS loop does not
    have): each of those is refused, so nothing it was asked for goes unwritten."""
    asked = []
    if callback.update_freq != "epoch":
        asked.append((f"update_freq={callback.update_freq!r}", "update_freq='epoch'"))
    if tfcompat.keras3.tensorboard_profiles(callback):
        asked.append(("profile_batch (a profile of some batches)", "profile_batch=0"))
    if callback.write_steps_per_second:
        asked.append(("write_steps_per_second=True", "write_steps_per_second=False"))
    if callback.write_graph:
        asked.append(("write_graph=True (the default)", "write_graph=False"))
    if asked:
        _refuse(f"TensorBoard with {', '.join(a for a, _ in asked)} writes at batch ends, "
                "but the batches run on the workers and only epoch-level hooks are called; "
                "per epoch it writes the logs (and histograms, embeddings) as usual.",
                f"TensorBoard(log_dir, {', '.join(f for _, f in asked)}).")


def check_callbacks(callbacks, method: str, validation: bool = False) -> None:
    """Callbacks with batch-level hooks: they need every step's logs on the chief, and the PS
    loop calls no batch hook. ``ModelCheckpoint`` and ``BackupAndRestore`` saving once per
    epoch (their default), ``TensorBoard`` writing once per epoch (:func:`_check_tensorboard`)
    and the progress bar at ``verbose=2`` only have no-op ones."""
    hooks = {"fit": ("on_batch_begin", "on_batch_end", "on_train_batch_begin",
                     "on_train_batch_end"),
             "evaluate": ("on_test_batch_begin", "on_test_batch_end"),
             "predict": ("on_predict_batch_begin", "on_predict_batch_end")}[method]
    if validation:
        hooks += ("on_test_batch_begin", "on_test_batch_end")
    for callback in callbacks:
        name = type(callback).__name__
        if name == "ProgbarLogger":
            continue  # verbose=1 is refused before; at 2 its batch hooks print nothing
        if name in _EPOCH_SAVERS and _keras_class(callback, name):
            freq = getattr(callback, "save_freq", "epoch")
            if freq != "epoch":
                _refuse(f"{name}(save_freq={freq!r}) saves every {freq} batches, but a "
                        "batch's end is only known on the worker that ran it.",
                        f"{name}(save_freq='epoch').")
            continue
        if name == "TensorBoard" and _keras_class(callback, name):
            _check_tensorboard(callback)
            continue
        found = tfcompat.keras3.overridden_hooks(callback, hooks)
        if found:
            _refuse(f"callback {name} has batch-level hooks ({', '.join(found)}), which need "
                    "each step's logs on the chief; the steps run on the workers and only "
                    "epoch-level hooks are called.",
                    f"remove {name} from callbacks=, or move its work to on_epoch_end.")


def check_placement(model) -> None:
    """Every variable of the model, its optimizer and its metrics lives on a parameter
    server: one that does not was made outside ``strategy.scope()``, and the workers would
    update a copy on the chief (or fail to reach it)."""
    groups = [("model", model.variables), ("metric", [v for m in model.metrics
                                                      for v in m.variables])]
    if getattr(model, "optimizer", None) is not None:
        groups.append(("optimizer", model.optimizer.variables))
    for kind, variables in groups:
        for v in variables:
            inner = tfcompat.keras3.inner_variable(v)
            if inner is not None and not on_ps(inner):
                _refuse(f"the {kind} variable {v.path} is not on a parameter server "
                        f"({getattr(inner, 'device', '?')}): it was made outside "
                        "strategy.scope().",
                        "create, build and compile the model (and its optimizer) inside "
                        "`with strategy.scope():`.")


def on_ps(variable) -> bool:
    """Is a ``tf.Variable`` (or each shard of a sharded one) on a ``/job:ps`` task?"""
    device = getattr(variable, "device", None)
    if device is None and hasattr(variable, "variables"):
        return all(on_ps(v) for v in variable.variables)
    return "/job:ps" in (device or "")


def check_cardinality(batches: int, needed: int, what: str) -> None:
    """A finite dataset (``batches`` >= 0; -1 infinite, -2 unknown) that a worker could read
    to its end: each worker reads its own copy from the start, and may take every step.

    >>> check_cardinality(-1, 100, "fit"), check_cardinality(100, 100, "fit")
    (None, None)
    """
    if 0 <= batches < needed:
        _refuse(f"the {what} data has {batches} batches, but one worker may read up to "
                f"{needed} (each worker reads its own copy of it from the start).",
                "end the dataset with .repeat() (and shuffle it per worker if the order "
                "matters).")


def data_ran_out(what: str, error: BaseException) -> Keras3PSError:
    """The error for a worker whose copy of the data ended during a step (raised at the
    epoch's ``join``)."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return Keras3PSError(f"{PREFIX}: a worker's copy of the {what} data ran out ({first}). "
                         "Fix: end the dataset with .repeat().")


def refuse_input(x, method: str) -> None:
    _refuse(f"{method}(x=<{type(x).__name__}>): Python-side data lives on the chief and the "
            "workers cannot read it.",
            "pass a tf.data.Dataset, a dataset function (input_context -> tf.data.Dataset) "
            "or NumPy arrays.")


def refuse_predict_input(x) -> None:
    _refuse(f"predict(x=<{type(x).__name__}>): predict reads its inputs on the chief, in "
            "order, and hands each batch to a worker; a dataset distributed to the workers "
            "has no order.", "pass NumPy arrays or a finite tf.data.Dataset.")


def refuse_extra(name: str, method: str) -> None:
    _refuse(f"{method}({name}=...) with a dataset function: the function makes the whole "
            "input.", f"return ({name} included) from the dataset function instead.")


def refuse_on_batch(method: str) -> None:
    fix = {"train_on_batch": "model.fit(x, y, batch_size=len(x), epochs=1, steps_per_epoch=1)",
           "test_on_batch": "model.evaluate(x, y, batch_size=len(x), steps=1)"}[method]
    _refuse(f"{method} would run its step on the chief.", f"{fix} runs it on a worker.")
