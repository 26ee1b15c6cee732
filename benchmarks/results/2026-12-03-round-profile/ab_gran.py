# Frozen at the commit that adds this folder (run on its working tree): it imports tf-hetero
# internals that may move. Results and command: README.md beside it.
"""Probe: H-PS with coarser granules (16, 32 samples; default 8): does the closing task's
launch phase (which includes the granule reads before the step's first op) shrink?"""
import sys
from tf_hetero.strategies import registry
from tf_hetero.tools import cli
import tf_hetero

e = registry.entry("hps")
for name, g in (("hpsgsixteen", 16), ("hpsgthirtytwo", 32)):
    def create(resolver, arg, _g=g, **o):
        return tf_hetero.HPSStrategy(resolver, granularity=_g)
    registry.register(name, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=f"hps granularity {g} (probe)",
                      sized=e.sized, config=None)
sys.exit(cli.main(sys.argv[1:]))
