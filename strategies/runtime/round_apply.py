"""A round's apply: the weighted mean of the lanes its engine includes, on each variable's PS,
handed to the user's optimizer once (TF glue; the lanes are filled by
:class:`~tf_hetero.strategies.runtime.accumulate.Accumulators`, whose module says how a
round works).

It also measures what the engine's policies read: the mean gradient's norm (the divergence
check, the step's ceiling), the gradient noise statistics of the round's own lanes
(:class:`~tf_hetero.policies.noise.GradientSample`) and the mean loss of its batch (the loss
check, :mod:`~tf_hetero.strategies.runtime.divergence`).
"""

from __future__ import annotations

import tensorflow as tf

from tf_hetero import tfcompat

__all__ = ["make_apply_fn", "GRADIENT_STATS", "column"]


def make_apply_fn(accs, optimizer, sparse: list, scales_velocity: bool):
    """A ``tf.function(weights, expected, scale, max_norm, velocity)`` applying one update of the
    lanes of ``accs`` (:class:`~tf_hetero.strategies.runtime.accumulate.Accumulators`;
    ``sparse[i]``: variable ``i`` is in sparse mode) with the user's ``optimizer``.

    ``weights[lane, slot]`` (float) says how much each micro-batch in that accumulator
    lane counts (1 for the closing round, less for a late gradient folded in, 0 for the
    rest); a lane counts only if its tag equals ``expected[lane, slot]`` (in sparse mode,
    a row of it only if its row tag does too). The update is the weighted mean
    ``sum(w * acc) / sum(w * count)``, times ``scale`` (a float32 scalar:
    the round's :class:`~tf_hetero.engine.api.UpdateScale`, 1 for most), scaled down
    so that the mean's norm (before ``scale``) is at most ``max_norm`` when that is
    positive (a spike the update scale clips; 0: no bound). With ``scales_velocity`` (the
    engine's update scale has ``velocity()``), the optimizer's velocity is scaled by
    ``velocity`` (a float32 scalar, 1 but after a back-off, where 0 restarts the momentum)
    first (SGD with momentum: a step the update scale backed off acts from this update on,
    not only as the old velocity decays; :func:`tf_hetero.tfcompat.variables.velocity_slots`);
    without it ``velocity`` is not read, and the apply has no op for it. A sparse-mode
    variable's mean goes to the optimizer as ``IndexedSlices`` of the rows the included
    lanes wrote (unique, sorted), as a stock step on the concatenated batch passes
    ``IndexedSlices``. Returns ``[micro-batches it
    contains, global norm of the mean gradient, GRADIENT_STATS..., skipped]`` (float64);
    a gradient that is not finite goes in as zeros (the weights stay finite; a momentum
    optimizer still moves once) and the engine stops training
    (:mod:`tf_hetero.policies.diverge`), except under a Keras 3 ``LossScaleOptimizer``,
    which gets it as it is, skips the round and lowers its scale (``skipped`` 1).
    Norms and statistics are of the unscaled mean when the step scaled its loss
    (:func:`tf_hetero.tfcompat.keras3.loss_scale`).

    The gradient statistics (:class:`~tf_hetero.policies.noise.GradientSample`) are of
    the round's own lanes (weight 1) and its dense variables: the units in them, how many
    lanes are not empty, the squared norm of their mean (before ``scale``) and
    ``sum_l |s_l|^2 / n_l`` over them, each computed on the variable's PS (one more
    scalar per variable reaches the chief), and the mean loss over those units (NaN if
    a write gave none).
    """
    strategy = accs.strategy
    schedule = getattr(optimizer, "_tf_hetero_schedule", None)  # runtime/schedule.py
    tau_extra = schedule.extra if schedule is not None else None
    # A Keras 3 step that scaled its loss pushed scaled gradients; their mean is unscaled
    # here for the norm, the clip and the noise statistics, and scaled back for the
    # optimizer's `apply`, which unscales it. A LossScaleOptimizer's `apply` also decides
    # whether the round's update is made: a non-finite mean goes to it as it is, and it
    # skips the round and halves its scale, as it would skip a local step.
    loss_scale = tfcompat.keras3.loss_scale(optimizer)
    skips = tfcompat.keras3.is_loss_scale_optimizer(optimizer)

    @tf.function(autograph=False)
    def apply_fn(weights, expected, scale, max_norm, velocity):
        return strategy.run(lambda: _apply_round(
            accs, optimizer, sparse, loss_scale, skips, tau_extra,
            weights, expected, scale, max_norm, velocity if scales_velocity else None))

    return apply_fn


def _apply_round(accs, optimizer, sparse, loss_scale, skips: bool, tau_extra,
                 weights, expected, scale, max_norm, velocity):
    """:func:`make_apply_fn`'s update, traced under the strategy (its arguments are the
    function's and what it read once from the optimizer; ``velocity`` ``None``: not
    scaled)."""
    back = tf.constant(1.0) if loss_scale is None else tf.cast(loss_scale, tf.float32)
    gain = scale / back  # the mean's factor: the update scale, the loss scale
    unscale_sq = tf.cast(1.0 / (back * back), tf.float64)
    valid = weights * tf.cast(tf.equal(accs.tags, expected), weights.dtype)
    counts = tf.cast(accs.counts, weights.dtype)
    n = tf.reduce_sum(valid * counts)  # the engine applies only with work (n > 0)
    # Every tensor of gradient size stays on its variable's PS task: the mean,
    # its squared norm and the finite check are computed there and only scalars
    # reach the chief, where the apply runs (applier.py); the optimizer's updates
    # are colocated with the variables. So an apply moves no gradient over the
    # network (as a worker-side apply did: there, twice).
    own = tf.cast(tf.equal(valid, 1.0), weights.dtype) * tf.cast(counts > 0, weights.dtype)
    n_own = tf.reduce_sum(own * counts)
    grads, squares, own_sq, lane_sq = _means(
        accs, valid, own, counts, n, n_own, gain, unscale_sq, sparse, skips)
    norm = tf.sqrt(tf.add_n(squares))
    applied = tf.reduce_sum(tf.cast(valid > 0, counts.dtype) * counts)
    # A NaN/Inf gradient would poison the weights for good: it goes in as zeros
    # (apply_gradients cannot sit in a tf.cond: its merge_call refuses control
    # flow), and the engine stops training on the norm it reports.
    finite = tf.math.is_finite(norm)
    clip = _clip(norm, max_norm, scale, finite)
    grads = _scaled(accs, grads, clip * tf.cast(back, tf.float64),
                    None if skips else finite)
    stats = _gradient_stats(accs, own, n_own, own_sq, lane_sq)
    if velocity is not None:  # before the update: automatic control dependencies run the
        _damp(optimizer, accs.variables, velocity)  # ops on one slot in program order
    done, skipped = _update(optimizer, grads, accs.variables, skips, tau_extra, scale)
    with tf.control_dependencies(done):
        return tf.stack([tf.cast(applied, tf.float64), norm] + stats + [skipped])


def _gradient_stats(accs, own, n_own, own_sq, lane_sq) -> list:
    """The :data:`GRADIENT_STATS` of the round's own lanes (float64): their units, the lanes
    not empty, the two squared-norm sums and the mean loss."""
    zero = tf.constant(0.0, tf.float64)
    return [tf.cast(n_own, tf.float64), tf.reduce_sum(tf.cast(own, tf.float64)),
            tf.add_n(own_sq) if own_sq else zero, tf.add_n(lane_sq) if lane_sq else zero,
            _round_loss(accs, own, n_own)]


def _clip(norm, max_norm, scale, finite):
    """The factor bounding the mean's norm before the scale at ``max_norm`` (0: no bound):
    the update of a round whose gradient spiked is scaled down to it; the reported norm
    stays the unclipped one (the update scale reads the spike from it)."""
    bound = tf.cast(max_norm, tf.float64) * tf.cast(scale, tf.float64)
    return tf.where((bound > 0) & (norm > bound) & finite,
                    bound / tf.maximum(norm, 1e-30), tf.constant(1.0, tf.float64))


def _damp(optimizer, variables, velocity):
    """Scales the optimizer's velocity of ``variables`` by ``velocity`` (1 but after a
    back-off; ``x * 1.0`` is ``x`` exactly), every round of an engine whose update scale
    has ``velocity()``, each on its slot's PS: no
    ``tf.cond``, which would put one op on the chief before every variable's update (both
    measured within the apply's noise: 12.8 and 13.5 ms against 11.5 without, 8 workers,
    benchmarks/results/2026-12-07-velocity/). Nothing for an optimizer without a velocity
    in weight units (tfcompat.variables.velocity_slots)."""
    for v in variables:
        for s in tfcompat.variables.velocity_slots(optimizer, v):
            s.assign(s * tf.cast(velocity, s.dtype))


def _update(optimizer, grads, variables, skips: bool, tau_extra, scale):
    """The optimizer's update with the mean ``grads``: ``(ops to wait for, skipped)``;
    ``skipped`` is 1.0 when a Keras 3 ``LossScaleOptimizer`` (``skips``) made no update.
    A scale-invariant schedule's ``tau_extra`` moves on by the gain of an update made."""
    # read before the update (ops on one variable run in program order)
    before = tf.identity(optimizer.iterations) if skips else None
    done = [optimizer.apply_gradients(zip(grads, variables))]
    skipped = tf.constant(0.0, tf.float64)
    if skips:  # by its own check: it made no update, so its iterations did not move
        with tf.control_dependencies(done):
            skipped = tf.cast(tf.equal(tf.identity(optimizer.iterations), before), tf.float64)
    if tau_extra is not None:  # none if skipped
        with tf.control_dependencies(done):
            done = [tau_extra.assign_add((tf.cast(scale, tau_extra.dtype) - 1.0)
                                         * tf.cast(1.0 - skipped, tau_extra.dtype))]
    return done, skipped


def _means(accs, valid, own, counts, n, n_own, gain, unscale_sq, sparse, skips):
    """In the apply: each variable's weighted mean gradient, computed on its PS (times
    ``gain``), its squared norm and (dense variables) the noise statistics of the
    round's own lanes. Returns ``(grads, squares, own_sq, lane_sq)``."""
    grads, squares, own_sq, lane_sq = [], [], [], []
    for i, acc in enumerate(accs.acc):
        with tf.device(acc.device):
            w = tf.cast(tf.transpose(valid), acc.dtype)  # [slot, lane]
            if skips and not sparse[i]:
                # A lane left out (weight 0) may hold a skipped round's NaN, and
                # 0 x NaN is NaN: only the included lanes are read.
                acc = tf.where(column(w > 0, acc.shape.rank - 2), acc, tf.zeros_like(acc))
            if sparse[i]:
                g = _sparse_mean(accs, i, w, tf.transpose(accs.gens), n, gain)
                squares.append(tf.cast(tf.reduce_sum(tf.square(g.values)), tf.float64))
            else:
                mean_sq, per_lane = _lane_stats(acc, tf.transpose(own),
                                                tf.transpose(counts), n_own)
                own_sq.append(mean_sq * unscale_sq)
                lane_sq.append(per_lane * unscale_sq)
                total = tf.tensordot(w, acc, axes=[[0, 1], [0, 1]])
                g = (total / tf.cast(tf.maximum(n, 1e-6), acc.dtype)
                     * tf.cast(gain, acc.dtype))
                squares.append(tf.cast(tf.reduce_sum(tf.square(g)), tf.float64))
            grads.append(g)
    return grads, squares, own_sq, lane_sq

def _scaled(accs, grads, factor, finite):
    """In the apply, on each variable's PS: ``grads`` times ``factor`` (float64), or
    zeros where ``finite`` (a scalar) is false (``None``: as they are)."""
    kept = []
    for acc, g in zip(accs.acc, grads):
        with tf.device(acc.device):
            c = tf.cast(factor, acc.dtype)
            values = g.values if isinstance(g, tf.IndexedSlices) else g
            values = (values * c if finite is None else
                      tf.where(finite, values * c, tf.zeros_like(values)))
            kept.append(tf.IndexedSlices(values, g.indices, g.dense_shape)
                        if isinstance(g, tf.IndexedSlices) else values)
    return kept

def _round_loss(accs, own, n_own):
    """In the apply, on the losses' PS: the mean loss of the round's own lanes; NaN if
    one of them was written without a loss, or if it has none (a round that only folds
    late shares in: a 0 there once passed for a loss, and a loss check took it for the
    lowest loss of the fit)."""
    with tf.device(accs.losses.device):
        own64 = tf.cast(own, tf.float64)
        loss = (tf.reduce_sum(tf.where(own64 > 0, accs.losses, 0.0))
                / tf.maximum(tf.cast(n_own, tf.float64), 1e-6))
        unknown = (tf.reduce_any(tf.math.is_nan(accs.losses) & (own64 > 0))
                   | tf.logical_not(n_own > 0))
        return tf.where(unknown, tf.constant(float("nan"), tf.float64), loss)

def _sparse_mean(accs, i, w, gens, n, scale) -> tf.IndexedSlices:
    """In the apply, on the PS: the rows of variable ``i`` that the included lanes wrote
    in their current generation (``gens[slot, lane]``: since their round's first write),
    weighted (``w[slot, lane]``, 0 for a lane not holding its expected round), over ``n``
    micro-batches, times ``scale``.

    Only row tags (``[2, lanes, rows]`` int64) are scanned whole; the accumulator is read
    at the touched rows only."""
    acc, rows = accs.acc[i], accs.rows[i]
    # [slot, lane, row]: the lane's weight where the row belongs to its generation.
    row_w = w[:, :, None] * tf.cast(tf.equal(rows, gens[:, :, None]), acc.dtype)
    touched = tf.where(tf.reduce_any(row_w > 0, axis=[0, 1]))[:, 0]  # sorted, unique
    row_w = tf.gather(row_w, touched, axis=2)  # [slot, lane, k]
    picked = tf.gather(acc, touched, axis=2)  # [slot, lane, k, *row shape]
    row_w = column(row_w, acc.shape.rank - 3)
    # a row left out may hold a skipped round's NaN (LossScaleOptimizer): 0 x NaN is NaN
    picked = tf.where(row_w > 0, picked, tf.zeros_like(picked))
    total = tf.reduce_sum(row_w * picked, axis=[0, 1])
    dense_shape = tf.constant(accs.variables[i].shape.as_list(), tf.int64)
    g = total / tf.cast(tf.maximum(n, 1e-6), acc.dtype) * tf.cast(scale, acc.dtype)
    return tf.IndexedSlices(g, touched, dense_shape)


#: What an apply returns after ``[micro-batches, gradient norm]``: the fields of a
#: :class:`~tf_hetero.policies.noise.GradientSample`.
GRADIENT_STATS = ("units", "lanes", "mean_sq", "lane_sq", "loss")


def _lane_stats(acc, own, counts, n_own):
    """On the variable's PS, for a dense accumulator ``acc[slot, lane, ...]``: the squared
    norm of the mean of the lanes ``own[slot, lane]`` (1 or 0) over ``n_own`` units, and
    ``sum |lane sum|^2 / lane units`` over them (float64 scalars)."""
    own = tf.cast(own, acc.dtype)
    axes = list(range(2, acc.shape.rank))
    mean = tf.tensordot(own, acc, axes=[[0, 1], [0, 1]]) / tf.cast(tf.maximum(n_own, 1.0),
                                                                    acc.dtype)
    per_lane = tf.reduce_sum(tf.square(acc), axis=axes) if axes else tf.square(acc)
    lane_sq = tf.reduce_sum(own * per_lane / tf.cast(tf.maximum(counts, 1.0), acc.dtype))
    return (tf.cast(tf.reduce_sum(tf.square(mean)), tf.float64),
            tf.cast(lane_sq, tf.float64))


def column(t: tf.Tensor, extra: int) -> tf.Tensor:
    """``t`` with ``extra`` trailing axes of size 1 (to broadcast over a row's shape)."""
    return tf.reshape(t, tf.concat([tf.shape(t), tf.ones([extra], tf.int32)], 0)) if extra else t
