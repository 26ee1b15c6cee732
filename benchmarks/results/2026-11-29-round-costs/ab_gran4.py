# Frozen at commit ed64128: run with `git checkout ed64128`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""A/B of H-PS's granularity 4 against the default 8: `hpsgfour` is H-PS with
granularity=4 samples (finer balance, twice the granules per share to read); `hps#2` in
the command line is the control row. The base entry is taken before anything is wrapped."""
import sys
from tf_hetero.strategies import registry
from tf_hetero.tools import cli

base = registry.entry("hps")


def create(resolver, arg, **o):
    return base.create(resolver, arg, granularity=4, **o)


registry.register("hpsgfour", create=create, default_arg=base.default_arg, arg=base.arg_meaning,
                  updates=base.micro_batches_per_update, help="hpsgfour (A/B)",
                  sized=base.sized, config=base.config)
sys.exit(cli.main(sys.argv[1:]))
