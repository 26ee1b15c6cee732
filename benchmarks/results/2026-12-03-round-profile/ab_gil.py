# Frozen at the commit that adds this folder (run on its working tree): it imports tf-hetero
# internals that may move. Results and command: README.md beside it.
"""A/B: rows named NAMEgil run NAME's strategy with sys.setswitchinterval(0.0005) during
their fit (Python's default 0.005 s), restored after. Then runs the tf-hetero CLI."""
import sys
from tf_hetero.strategies import registry
from tf_hetero.tools import benchrow, cli

for name in ("hps", "pss"):
    e = registry.entry(name)
    registry.register(name + "gil", create=e.create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=f"{name}, GIL switch 0.5 ms (A/B)",
                      sized=e.sized, config=e.config)

_timed = benchrow._timed_fit
def timed(row, *a, **k):
    if not row.spec.endswith("gil"):
        return _timed(row, *a, **k)
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        return _timed(row, *a, **k)
    finally:
        sys.setswitchinterval(old)
benchrow._timed_fit = timed
sys.exit(cli.main(sys.argv[1:]))
