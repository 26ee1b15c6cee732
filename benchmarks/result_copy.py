"""What copying every round task's result to the chief costs: H-PS and AutoStrategy with their
tasks' results left on the workers (the default: each round's loss is checked from its apply,
`strategies/runtime/divergence.py`) beside the same strategies copying each task's result and
checking its loss (``LossWatch.by_round = False``, the behaviour before), every repeat's rows
shuffled on one cluster, as `benchmarks/auto_variants.py` runs them.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/result_copy.py one_slow 3 OUT \\
        hps:2 hpscopy:2 auto autocopy

``hpscopy`` / ``autocopy``: the strategy with ``LossWatch.by_round = False``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import auto_variants  # noqa: E402
from tf_hetero.strategies import registry  # noqa: E402


def _copying(name: str) -> None:
    """Registers ``<name>copy``: ``name`` with every task's result copied to the chief."""
    base = registry.entry(name)

    def create(resolver, arg, **options):
        strategy = base.create(resolver, arg, **options)
        strategy.coordinator.losses.by_round = False
        return strategy

    registry.register(f"{name}copy", create, base.default_arg, base.arg_meaning,
                      updates=base.micro_batches_per_update,
                      help=f"{base.help}; every task's result copied to the chief",
                      replace=True, sized=base.sized, config=base.config)


if __name__ == "__main__":
    for strategy in ("hps", "auto"):
        _copying(strategy)
    auto_variants.main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:])
