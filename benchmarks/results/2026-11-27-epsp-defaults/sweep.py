# Frozen at commit 002ffd3: run with `git checkout 002ffd3`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. (Run at `eac3b7e`; the tree of
# `002ffd3`, which added it, has the same package code.) Results and command: README.md beside
# it.
"""EPSP straggler factor and round size on the suite (issue 11 item 4): variants registered
in this process, then the scenario bench as `tf-hetero bench --scenario` runs it."""
import sys
from tf_hetero.strategies import registry
from tf_hetero.tools.scenarios import load_scenarios, run_scenarios


def variant(factor):
    def create(resolver, arg, **o):
        import tf_hetero
        return tf_hetero.EPSPStrategy(resolver, round_batches=arg, straggler_factor=factor, **o)

    def config(workers, arg):
        from tf_hetero.strategies import config as c
        return c.epsp(workers, round_batches=arg, straggler_factor=factor)
    return dict(create=create, config=config, arg="batches per round",
                updates=lambda n, a: a or n, sized=True, help=f"EPSP, straggler_factor={factor}")


registry.register("epspfthree", **variant(3.0))
registry.register("epspnever", **variant(1e9))
per_worker = sys.argv[1]
rows = ("pss", "epsp", "epspfthree", "epspnever", "epsp8", "hps8")
_, failed = run_scenarios(load_scenarios("one_slow,classes"), "runs/s31-sweep/scenarios",
                          strategies=rows, repeats=3, data_per_worker=per_worker)
print("failed:", failed)
