# Frozen at tag rejected/granule-direct: run with `git checkout rejected/granule-direct`; it
# imports tf-hetero internals of that tag, which may have moved or changed since. (The tag
# holds b95026e with the direct reader applied, which this script measures.) Results and
# command: README.md beside it.
"""A/B of how a sized task reads each granule: `hpsdirect` by the worker iterator's
IteratorGetNext without the distributed iterator's partial-batch handling (the reader of
strategies/runtime/granules.py), `hps` and `hpsagain` (an identical control row) by a plain
next() (optional, has-value sums, two conds per granule). Every row's create sets the read
the next trace uses; the base entry is taken before any row wraps it."""
import sys
from tf_hetero.strategies import registry
from tf_hetero.strategies.runtime.granules import GranuleIterator
from tf_hetero.tools import cli

DIRECT = GranuleIterator._next


def plain(self):
    return next(self._iterator)


base = registry.entry("hps")  # unwrapped: every row below calls the real create
for name, read in (("hps", plain), ("hpsdirect", DIRECT), ("hpsagain", plain)):
    def create(resolver, arg, _read=read, **o):
        GranuleIterator._next = _read
        return base.create(resolver, arg, **o)

    registry.register(name, create=create, default_arg=base.default_arg, arg=base.arg_meaning,
                      updates=base.micro_batches_per_update, help=name + " (A/B)",
                      sized=base.sized, config=base.config, replace=name == "hps")
sys.exit(cli.main(sys.argv[1:]))
