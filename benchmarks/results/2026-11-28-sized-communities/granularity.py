# Frozen at commit 99c2bd0: run with `git checkout 99c2bd0`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. (First run at `353c40f` (this folder),
# last at `99c2bd0` (../2026-11-29-granularity/).) Results and command: README.md beside it.
"""Sized CASP at a 500% delay: does a finer granule (4 samples instead of 8) let the 6x
worker take a share small enough not to set the round? Registers the variant in this
process, then runs the scenario bench as `tf-hetero bench --scenario` runs it.

    python benchmarks/results/2026-11-28-sized-communities/granularity.py
"""
import os
import sys

from tf_hetero.strategies import registry
from tf_hetero.tools.scenarios import load_scenarios, run_scenarios


def sized_casp(granularity):
    def create(resolver, arg, **o):
        import tf_hetero
        return tf_hetero.CASPStrategy(resolver, batch_sizes=True, granularity=granularity, **o)

    def config(workers, arg):
        from tf_hetero.strategies import config as c
        return c.casp(workers, batch_sizes=True, granularity=granularity)
    return dict(create=create, config=config, updates=lambda n, a: n,
                help=f"CASP, sized communities, granularity={granularity}")


registry.register("caspsizedfine", **sized_casp(4))
here = os.path.dirname(os.path.abspath(__file__))
scenarios = sys.argv[1] if len(sys.argv) > 1 else "delay500"
_, failed = run_scenarios(load_scenarios(scenarios, os.path.join(here, "scenarios")),
                          "runs/s33-granularity/scenarios",
                          strategies=("pss", "caspsized", "caspsizedfine"), repeats=3)
print("failed:", failed)
