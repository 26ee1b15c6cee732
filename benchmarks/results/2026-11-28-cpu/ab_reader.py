# Frozen at commit 48f5b2a: run with `git checkout 48f5b2a`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""Diagnostic A/B of the granule reader's fixed cost: `hpsone` is H-PS with every share one
32-sample granule (memory_budget=32, granularity=32: BSP's sizes, the granule loop running no
iteration); `hpsonedirect` is the same with the step reading its granule by a plain next()
instead of the granule reader (TensorArray, while loop, concat). Every row's create sets
which reader the next trace uses (rows run one at a time). Compare with `bsp` in the same
run."""
import sys
from tf_hetero.strategies import registry
from tf_hetero.strategies.runtime import tracing
from tf_hetero.tools import cli

Reader = tracing.GranuleIterator
DIRECT = [False]


def reader(iterator, size):
    return iterator if DIRECT[0] else Reader(iterator, size)


tracing.GranuleIterator = reader

for base in ("pss", "bsp"):
    e = registry.entry(base)

    def create(resolver, arg, _e=e, **o):
        DIRECT[0] = False
        return _e.create(resolver, arg, **o)

    registry.register(base, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=e.help, sized=e.sized,
                      config=e.config, replace=True)

for name, direct in (("hpsone", False), ("hpsonedirect", True)):
    e = registry.entry("hps")

    def create(resolver, arg, _e=e, _d=direct, **o):
        DIRECT[0] = _d
        return _e.create(resolver, arg, memory_budget=32, granularity=32, **o)

    registry.register(name, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=name + " (diagnostic)",
                      sized=e.sized, config=e.config)
sys.exit(cli.main(sys.argv[1:]))
