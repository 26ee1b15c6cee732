"""Variable internals: a PS variable's wrapper and inner variable, optimizer slots, checkpoint
dependencies (what moving a variable to another PS task reads and writes).

Sources (TensorFlow 2.21 / tf_keras 2.21, paths under site-packages):

- ``tensorflow/python/distribute/ps_values.py``: ``CachingVariable`` (~373; ``_v`` the
  inner variable, ``_cache`` its cached read), ``AggregatingVariable`` (~50; ``_v``);
- ``tensorflow/python/ops/resource_variable_ops.py``: ``ResourceVariable`` (no public
  constructor that bypasses the strategy's variable creator), ``_unique_id`` (~481),
  ``_distribute_strategy`` (~474);
- ``tf_keras/src/optimizers/optimizer.py``: ``_var_key`` (~161, a variable's
  ``_unique_id``), ``_index_dict`` (~444) and the slot lists aligned with it;
- ``tf_keras/src/optimizers/legacy/optimizer_v2.py``: ``_slots`` (~392) keyed by the module
  function ``_var_key`` (~1660);
- ``tensorflow/python/trackable/base.py``: ``_lookup_dependency`` (~423),
  ``_track_trackable`` (~546);
- ``tf_keras/src/engine/training.py``: ``Model._distribution_strategy`` (~302, set to
  ``None`` by ``predict`` under PSS, ~2582).

The tests that fail when an upgrade breaks one are named in docs/TF_INTERNALS.md.
"""

from __future__ import annotations

__all__ = ["is_ps_variable", "caching_variable", "inner_variable", "swap_inner",
           "resource_variable", "variable_strategy", "optimizer_slots", "velocity_slots",
           "tracked_child",
           "track_child", "model_strategy", "model_variables_strategy"]


def is_ps_variable(variable) -> bool:
    """``variable`` is a PS variable wrapper (``CachingVariable``, or an
    ``AggregatingVariable`` around one): it holds its inner variable in ``_v``. A
    ``ShardedVariable`` and a plain ``ResourceVariable`` are not."""
    return hasattr(variable, "_v")


def caching_variable(variable):
    """The ``CachingVariable`` of a strategy variable (inside an ``AggregatingVariable`` with
    GPU workers); ``TypeError`` for anything else."""
    inner = getattr(variable, "_v", None)
    if inner is not None and hasattr(inner, "_v") and hasattr(inner, "_cache"):
        return inner
    if inner is not None and hasattr(variable, "_cache"):
        return variable
    raise TypeError(f"{getattr(variable, 'name', variable)!r} is not a ParameterServerStrategy "
                    "variable (no CachingVariable wrapper): it cannot be moved.")


def inner_variable(variable):
    """The ``ResourceVariable`` a strategy variable's ``CachingVariable`` holds (``_v``)."""
    return caching_variable(variable)._v  # pylint: disable=protected-access


def swap_inner(variable, new) -> None:
    """Makes the strategy variable's ``CachingVariable`` hold ``new`` (``_v``) and drops its
    cached read (``_cache``). The wrapper keeps the first inner variable's ``_unique_id``
    (set on the wrapper): tf_keras optimizers key their slots by it, and with a new id the
    next trace fails with "The optimizer cannot recognize variable ..."."""
    w = caching_variable(variable)
    if "_unique_id" not in w.__dict__:
        w._unique_id = w._v._unique_id  # pylint: disable=protected-access
    w._v = new  # pylint: disable=protected-access
    w._cache = None  # pylint: disable=protected-access


def variable_strategy(variable):
    """The strategy a variable was created under (``_distribute_strategy``), or ``None``."""
    return getattr(variable, "_distribute_strategy", None)


def resource_variable(value, like):
    """A new ``ResourceVariable`` holding ``value``, with ``like``'s trainability, name, dtype,
    constraint and strategy, created directly (the strategy's variable creator would
    ignore the caller's ``tf.device``). ``distribute_strategy``: legacy optimizers'
    ``colocate_vars_with`` refuses a variable created outside the strategy's scope."""
    from tensorflow.python.ops.resource_variable_ops import ResourceVariable

    return ResourceVariable(value, trainable=like.trainable, name=like.name.split(":")[0],
                            dtype=like.dtype, constraint=like.constraint,
                            distribute_strategy=variable_strategy(like))


def optimizer_slots(optimizer, variable) -> list:
    """The slot variables ``optimizer`` keeps for ``variable``: a tf_keras optimizer's slot
    lists aligned with ``_index_dict`` (keyed by ``_var_key``), a legacy ``OptimizerV2``'s
    ``_slots[_var_key(variable)]``, a Keras 3 optimizer's (:func:`tf_hetero.tfcompat.keras3.
    optimizer_slots`); ``[]`` if it has none for it."""
    from tf_hetero.tfcompat import keras3

    if keras3.is_optimizer(optimizer):
        return keras3.optimizer_slots(optimizer, variable)
    out = []
    index = getattr(optimizer, "_index_dict", None)
    if index is not None:
        key = optimizer._var_key(variable)  # pylint: disable=protected-access
        if key not in index:
            return out
        i = index[key]
        for value in vars(optimizer).values():
            if (isinstance(value, list) and len(value) == len(index)
                    and all(is_ps_variable(s) for s in value)):
                out.append(value[i])
    slots = getattr(optimizer, "_slots", None)
    if isinstance(slots, dict):
        from tf_keras.src.optimizers.legacy.optimizer_v2 import _var_key

        out.extend(slots.get(_var_key(variable), {}).values())
    return out


def velocity_slots(optimizer, variable) -> list:
    """The slot holding ``optimizer``'s velocity of ``variable`` in weight units, the one
    SGD with momentum adds to the weights each update (``m = momentum m - lr g; w += m``:
    tf_keras' ``SGD``, tk/optimizers/sgd.py ~110, and Keras 3's, k3/optimizers/sgd.py; one
    slot kind, so its :func:`optimizer_slots`); ``[]`` for any other optimizer, whose
    state is in gradient units (Adam's moments) or made inside its first update (a
    legacy ``OptimizerV2`` creates its slots in ``apply_gradients``). A
    ``LossScaleOptimizer``'s is its inner optimizer's."""
    import tf_keras

    from tf_hetero.tfcompat import keras3

    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        optimizer = inner
    kinds = [tf_keras.optimizers.SGD]
    if keras3.is_optimizer(optimizer):
        import keras

        kinds.append(keras.optimizers.SGD)
    if not isinstance(optimizer, tuple(kinds)):
        return []
    return optimizer_slots(optimizer, variable)


def tracked_child(trackable, name: str):
    """The object tracked under ``name`` in ``trackable``'s checkpoint dependencies, or
    ``None`` (``_lookup_dependency``)."""
    return trackable._lookup_dependency(name)  # pylint: disable=protected-access


def track_child(trackable, child, name: str) -> None:
    """Tracks ``child`` under ``name`` in ``trackable``'s checkpoint dependencies, so that a
    checkpoint of ``trackable`` saves it and a restore (immediate or deferred) reaches it
    (``_track_trackable``)."""
    trackable._track_trackable(child, name)  # pylint: disable=protected-access


def model_strategy(model):
    """The strategy a tf_keras model was built under (``_distribution_strategy``), or
    ``None``. Unlike the public ``distribute_strategy`` it does not fall back to the current
    strategy: ``predict`` under PSS sets it to ``None`` while it runs."""
    return getattr(model, "_distribution_strategy", None)


def model_variables_strategy(model):
    """The strategy ``model``'s variables live under, or ``None``: :func:`model_strategy`,
    else (``predict`` under PSS sets that to ``None`` while it runs, and an error inside it
    can leave it so) its first weight's. An unbuilt model has none (its weights raise)."""
    strategy = model_strategy(model)
    if strategy is None and model.built:
        strategy = next((variable_strategy(v) for v in model.weights[:1]), None)
    return strategy
