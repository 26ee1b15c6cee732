# Frozen at commit f2695ed: run with `git checkout f2695ed`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""Diagnostic A/B of what a sized task's granule reading costs: registers `hpseven` (H-PS with
every worker's share pinned to one dataset batch by memory_budget=32: BSP's sizes, read as 4
granules of 8 through the granule loop) and `hpsone` (the same shares as one granule of 32:
the loop runs no iteration) in this process, then runs the tf-hetero command line with the
arguments given. Compare with `bsp` (the same shares, no granules) in the same run."""
import sys
from tf_hetero.strategies import registry
from tf_hetero.tools import cli

for name, options in (("hpseven", {"memory_budget": 32}),
                      ("hpsone", {"memory_budget": 32, "granularity": 32})):
    e = registry.entry("hps")

    def create(resolver, arg, _e=e, _o=options, **o):
        return _e.create(resolver, arg, **_o, **o)

    registry.register(name, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=name + " (diagnostic)",
                      sized=e.sized, config=e.config)
sys.exit(cli.main(sys.argv[1:]))
