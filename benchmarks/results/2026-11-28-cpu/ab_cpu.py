# Frozen at commit 1ea9fb1: run with `git checkout 1ea9fb1`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""Diagnostic A/B of where a round task's CPU goes: registers `hpsnoapply` (H-PS whose
rounds' applies do not run: the chief reports each round applied at once, so the model never
changes) and `hpsbare` (that, and every task's code says "write nothing", so its step
computes and writes no accumulator; it then reads one granule, not its share) and `hpslean` (H-PS whose apply computes the lanes' weights on the PS holding the tags and
checks each variable's gradient for NaN/Inf on its own PS, instead of on the chief between the
mean and the update: one chief round trip less per apply; dense variables only) in this
process, then runs the tf-hetero command line with the arguments given. Training figures
of these rows mean nothing; their samples/s and CPU per sample do."""
import sys
import numpy as np
from tf_hetero.strategies import registry
from tf_hetero.strategies.runtime.accumulate import NO_ROUND
from tf_hetero.tools import cli


class _Done:
    def __init__(self, applied):
        self.value = np.array([applied, 1.0])

    def numpy(self):
        return self.value


def variant(name, bare):
    e = registry.entry("hps")

    def create(resolver, arg, _e=e, **o):
        s = _e.create(resolver, arg, **o)
        c = s.coordinator
        submit = c.applier.submit

        def skip(round_id, fn, args):
            applied = sum(c.engine.rounds[round_id].lanes.values())
            submit(round_id, lambda: _Done(applied), ())

        c.applier.submit = skip
        if bare:
            code_tensor = c.code_tensor
            c.code_tensor = lambda code: code_tensor(NO_ROUND)
        return s

    registry.register(name, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=name + " (diagnostic)",
                      sized=e.sized, config=e.config)


def lean_apply_fn(self, optimizer):
    import tensorflow as tf
    strategy = self.strategy
    self._frozen = True

    @tf.function
    def apply_fn(weights, expected, scale):
        def step():
            with tf.device(self.tags.device):
                valid = weights * tf.cast(tf.equal(self.tags, expected), weights.dtype)
                counts = tf.cast(self.counts, weights.dtype)
                n = tf.reduce_sum(valid * counts)
                applied = tf.reduce_sum(tf.cast(valid > 0, counts.dtype) * counts)
                wt = tf.transpose(valid)
            grads, squares = [], []
            for acc in self.acc:
                with tf.device(acc.device):
                    total = tf.tensordot(tf.cast(wt, acc.dtype), acc, axes=[[0, 1], [0, 1]])
                    g = (total / tf.cast(tf.maximum(n, 1e-6), acc.dtype)
                         * tf.cast(scale, acc.dtype))
                    sq = tf.reduce_sum(tf.square(g))
                    grads.append(tf.where(tf.math.is_finite(sq), g, tf.zeros_like(g)))
                    squares.append(tf.cast(sq, tf.float64))
            with tf.control_dependencies(
                    [optimizer.apply_gradients(zip(grads, self.variables))]):
                return tf.stack([tf.cast(applied, tf.float64), tf.sqrt(tf.add_n(squares))])

        return strategy.run(step)

    return apply_fn


def lean(name):
    import types
    e = registry.entry("hps")

    def create(resolver, arg, _e=e, **o):
        s = _e.create(resolver, arg, **o)
        t = s.coordinator.tracer
        find = t._accumulators_for

        def accumulators_for(optimizer, variables):
            acc = find(optimizer, variables)
            acc.make_apply_fn = types.MethodType(lean_apply_fn, acc)
            return acc

        t._accumulators_for = accumulators_for
        return s

    registry.register(name, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=name + " (A/B)",
                      sized=e.sized, config=e.config)


lean("hpslean")
variant("hpsnoapply", False)
variant("hpsbare", True)
sys.exit(cli.main(sys.argv[1:]))
