"""``AutoStrategy``: the strategy that decides by itself how to synchronize, how large a
round's batch and how hard its step, from what it measures during the fit. The user gives
what stock ``ParameterServerStrategy`` needs: the one-batch learning rate (and momentum) they
would use there.

- **Synchronization**: asynchronous steps (as stock PSS) while the workers run at similar
  speeds or slow down only now and then; rounds sized by speed (H-PS) once a worker is
  persistently slower; switched at round boundaries during the fit.
- **Global batch** of the sized rounds: the batch of largest goodput from the measured
  capacity, round cost and gradient noise, within ``max_batches`` dataset batches per
  worker.
- **Step**: AdaScale's gain over the one-batch rate, from the gradient noise each round's
  apply measures (:mod:`tf_hetero.policies.noise`); 1 for an asynchronous step.

Every decision is one line in the output when it changes, an ``auto_decision`` event in the
monitor, and the figures ``auto_sized`` (1: sized rounds), ``auto_global_batch`` and
``auto_gain`` in the monitor's summary, beside the gradient noise (``noise_scale``,
``grad_variance``, ``grad_sq``; Keras logs and TensorBoard through
:class:`tf_hetero.MonitorLogs`). How each choice is made: :mod:`tf_hetero.policies.auto`.

The gain multiplies the round's mean gradient, which is a larger step for SGD (with or without
momentum); optimizers that normalize the gradient's scale (Adam and its kind) would ignore
it, so they are refused with the fix.

>>> strategy = tf_hetero.AutoStrategy(resolver)                      # doctest: +SKIP
>>> with strategy.scope():                                          # doctest: +SKIP
...     model.compile(tf_keras.optimizers.SGD(0.02, momentum=0.9), loss)
>>> model.fit(dataset_fn, epochs=4, steps_per_epoch=100)            # doctest: +SKIP
"""

from __future__ import annotations

from tf_hetero import tfcompat
from tf_hetero.policies.auto import AutoConfig
from tf_hetero.strategies import config as configs
from tf_hetero.strategies.base import HeteroStrategy, num_workers

__all__ = ["AutoStrategy"]

#: Optimizer classes whose step scales with the gradient (the gain applies).
_SCALED = ("SGD",)


class AutoStrategy(HeteroStrategy):
    """Chooses synchronization, global batch and step gain from measurements.

    Args:
      cluster_resolver, variable_partitioner: as for ``tf.distribute.ParameterServerStrategy``.
      settings: a :class:`tf_hetero.policies.auto.AutoConfig` (every field has a default).
      granularity: samples per work unit of the sized rounds' shares (a divisor of the
        dataset's batch).
      stall_timeout_s, placement, connect_timeout_s, rebalance: as for every tf-hetero
        strategy (:class:`~tf_hetero.strategies.base.HeteroStrategy`).
    """

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 settings: AutoConfig | None = None, granularity: int | None = None,
                 stall_timeout_s: float = 600.0, placement="round_robin",
                 connect_timeout_s: float | None = None, rebalance=None):
        workers = num_workers(cluster_resolver, "AutoStrategy")
        config = configs.auto(workers, granularity=granularity, settings=settings,
                              stall_timeout_s=stall_timeout_s)
        super().__init__(cluster_resolver, variable_partitioner, config=config,
                         placement=placement, connect_timeout_s=connect_timeout_s,
                         rebalance=rebalance)
        self.controller = config.sync
        self.controller.say = lambda line: print(f"[tf-hetero] AutoStrategy: {line}",
                                                 flush=True)

    def fit_starts(self, model) -> None:
        optimizer = getattr(model, "optimizer", None)
        # A Keras 3 LossScaleOptimizer's step is its inner optimizer's, unscaled
        stepper = (optimizer.inner_optimizer if tfcompat.keras3.is_loss_scale_optimizer(optimizer)
                   else optimizer)
        name = type(stepper).__name__ if optimizer is not None else None
        if name is not None and name not in _SCALED:
            raise ValueError(
                f"AutoStrategy: the model's optimizer is {name}, whose step does not scale "
                "with the gradient, so the gain of a larger batch (AdaScale) cannot be "
                "applied. Fix: compile with tf_keras.optimizers.SGD (keras.optimizers.SGD for a "
                "Keras 3 model; momentum allowed, a LossScaleOptimizer around it too), or use "
                "HPSStrategy with a learning rate for its round's batch.")
        if optimizer is not None:  # a schedule moves on by each update's gain (AdaScale)
            from tf_hetero.strategies.runtime.schedule import install

            install(optimizer, self)

    def fit_line(self, plan: dict) -> str:
        c = self.controller
        return (f"[tf-hetero] AutoStrategy: this fit runs {plan['steps']} steps; it starts "
                f"with {'asynchronous steps' if c.mode == 'async' else 'sized rounds'} and "
                "chooses synchronization, global batch and step from what it measures (one "
                "line per change). Learning rate: the one-batch rate (as for stock PSS); "
                "optimizer.iterations counts updates (a step or a round each).")
