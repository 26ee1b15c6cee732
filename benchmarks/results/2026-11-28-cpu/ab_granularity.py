# Frozen at commit 069beb0: run with `git checkout 069beb0`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""A/B of H-PS's granularity: registers `hpsgsixteen` and `hpsgthirtytwo` (H-PS with
granularity=16 and 32 samples instead of 8: fewer granules per share to read, coarser
balance) in this process, then runs the tf-hetero command line with the arguments given."""
import sys
from tf_hetero.strategies import registry
from tf_hetero.tools import cli

for name, g in (("hpsgsixteen", 16), ("hpsgthirtytwo", 32)):
    e = registry.entry("hps")

    def create(resolver, arg, _e=e, _g=g, **o):
        return _e.create(resolver, arg, granularity=_g, **o)

    registry.register(name, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=name + " (A/B)",
                      sized=e.sized, config=e.config)
sys.exit(cli.main(sys.argv[1:]))
