# Frozen at tag rejected/granule-switch: run with `git checkout rejected/granule-switch`; it
# imports tf-hetero internals of that tag, which may have moved or changed since. (The tag
# holds b95026e with the switch reader applied.) Results and command: README.md beside it.
"""KEPT AS EVIDENCE, NOT A VALID A/B: the variant rows take `registry.entry("hps")` *after*
the loop above replaced it with a wrapper that resets SWITCH, so `hpsswitch` and
`hpsswitcheight` ran the plain loop reader, exactly like `hps`. Its runs (identical_base1/,
identical_base100/) measure the noise between identical rows. See README.md.

Intended: A/B of the granule reader: `hps` reads a share of n granules in a while loop (TensorArray,
concat); `hpsswitch` reads it with a switch over the share's size, each branch n plain next()
calls unrolled and one concat (no loop frames, no TensorArray). Every row's create sets which
reader the next trace uses (rows run one at a time)."""
import sys
import tensorflow as tf
from tf_hetero.strategies import registry
from tf_hetero.strategies.runtime import tracing
from tf_hetero.tools import cli

Reader = tracing.GranuleIterator
SWITCH = [False]
MAX = 16  # the bench default's round in granules: 4 workers x 32 samples / 8


class SwitchReader(Reader):
    def get_next(self):
        def read(n):
            parts = [tf.nest.flatten(next(self._iterator)) for _ in range(n)]
            return [tf.concat(p, 0) for p in zip(*parts)]
        first = self._iterator.element_spec
        out = tf.switch_case(tf.cast(self._size - 1, tf.int32),
                             [lambda n=n: read(n) for n in range(1, MAX + 1)],
                             default=lambda: tf.nest.flatten(Reader.get_next(self)))
        flat = tf.nest.flatten(first)
        out = [tf.ensure_shape(o, [None] + s.shape[1:].as_list()) for o, s in zip(out, flat)]
        return tf.nest.pack_sequence_as(first, out)


def reader(iterator, size):
    return SwitchReader(iterator, size) if SWITCH[0] else Reader(iterator, size)


tracing.GranuleIterator = reader

for base in ("pss", "bsp", "hps"):
    e = registry.entry(base)

    def create(resolver, arg, _e=e, **o):
        SWITCH[0] = False
        return _e.create(resolver, arg, **o)

    registry.register(base, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=e.help, sized=e.sized,
                      config=e.config, replace=True)

e = registry.entry("hps")
for name, m in (("hpsswitch", 16), ("hpsswitcheight", 8)):
    def create(resolver, arg, _e=e, _m=m, **o):
        global MAX
        SWITCH[0], MAX = True, _m
        return _e.create(resolver, arg, **o)

    registry.register(name, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=name + " (diagnostic)",
                      sized=e.sized, config=e.config)
sys.exit(cli.main(sys.argv[1:]))
