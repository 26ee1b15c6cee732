# Frozen at commit 44dcb91: run with `git checkout 44dcb91`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. (Run at `1f836ba`; the tree of
# `44dcb91`, which added it, has the same package code.) Results and command: README.md beside
# it.
"""EPSP slack sync: the weight of late gradients (issue 11 item 4), measured. Variants are
registered in this process, then the scenario bench runs as `tf-hetero bench --scenario`
runs it. Slack rounds close at a quorum (0.75 of their tasks) or at 2x their projected time;
every slack row's step follows the samples its round averages (SampledScale)."""
import dataclasses
import sys

from tf_hetero.strategies import registry
from tf_hetero.tools.scenarios import load_scenarios, run_scenarios


def variant(late="fold", power=1.0):
    def config(workers, arg):
        from tf_hetero import policies
        from tf_hetero.engine import LateFolding
        from tf_hetero.strategies import config as c
        cfg = c.epsp(workers, sync="slack", round_batches=arg, late=late)
        if late == "fold":  # the same folding, another weight: 1 / (1 + staleness) ** power
            cfg = dataclasses.replace(cfg, components=tuple(
                LateFolding(policies.StalenessWeight(8, power=power))
                if isinstance(x, LateFolding) else x for x in cfg.components))
        return cfg

    def create(resolver, arg, **o):
        from tf_hetero.strategies.base import HeteroStrategy, num_workers
        return HeteroStrategy(resolver, config=config(num_workers(resolver, "sweep"), arg), **o)
    return dict(create=create, config=config, arg="batches per round",
                updates=lambda n, a: a or n, sized=True,
                help=f"EPSP slack sync, late={late}, power={power}")


def enforced(**kw):
    """EPSP enforced sync with one default changed (its 2-point final-accuracy gap to BSP:
    the straggler sitting out, or the transfer copies?)."""
    def config(workers, arg):
        from tf_hetero.strategies import config as c
        return c.epsp(workers, round_batches=arg, **kw)

    def create(resolver, arg, **o):
        import tf_hetero
        return tf_hetero.EPSPStrategy(resolver, round_batches=arg, **kw, **o)
    return dict(create=create, config=config, arg="batches per round",
                updates=lambda n, a: a or n, sized=True, help=f"EPSP, {kw}")


registry.register("epspnever", **enforced(straggler_factor=1e9))   # the straggler never sits out
registry.register("epspnocopy", **enforced(transfer_factor=None))  # no task transfer
registry.register("slackdrop", **variant("drop"))
registry.register("slackfull", **variant("fold", 0.0))   # a late gradient counts as on time
registry.register("slacksquare", **variant("fold", 2.0))  # 1 / (1 + s)^2
scenarios = sys.argv[1] if len(sys.argv) > 1 else "one_slow"
rows = ("pss", "epsp", "epspnever", "epspnocopy", "epspslack", "slackdrop", "slackfull",
        "slacksquare")
_, failed = run_scenarios(load_scenarios(scenarios), "runs/s32-slack/scenarios",
                          strategies=rows, repeats=3)
print("failed:", failed)
