# Frozen at commit 65ac43f: run with `git checkout 65ac43f`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""A/B of runtime/closures.py: registers `hpsstock` and `bspstock` (H-PS and BSP with a
closure cache that never copies, so every closure is built the stock way) in this process,
then runs the tf-hetero command line with the arguments given (README beside this file)."""
import sys
from tf_hetero.strategies import registry
from tf_hetero.tools import cli

class NoCache:
    def copy_of(self, *a): return None
    def keep(self, *a): pass
    def clear(self): pass

for name in ("hps", "bsp"):
    e = registry.entry(name)
    def create(resolver, arg, _e=e, **o):
        s = _e.create(resolver, arg, **o)
        s.coordinator.closures = NoCache()
        return s
    registry.register(name + "stock", create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=f"{name} building every closure the stock way (A/B)",
                      sized=e.sized, config=e.config)
sys.exit(cli.main(sys.argv[1:]))
