"""A toy assignment policy, as a user would add one: the extension test shows that a new
scheme is one policy file plus one registry line, with no change to the engine.

Every other worker (the odd-numbered ones) sits out odd rounds.

>>> from tf_hetero.engine import RoundContext
>>> EveryOtherSitsOutOddRounds().plan(RoundContext(1, idle=(0, 1, 2, 3))).entries
[0, 2]
>>> EveryOtherSitsOutOddRounds().plan(RoundContext(2, idle=(0, 1, 2, 3))).entries
[0, 1, 2, 3]
"""

from __future__ import annotations

from tf_hetero.engine import Plan, RoundContext


class EveryOtherSitsOutOddRounds:
    """One task per live worker, except odd-numbered workers in odd rounds."""

    def plan(self, ctx: RoundContext) -> Plan:
        odd_round = ctx.round_id % 2 == 1
        workers = [w for w in ctx.live if not (odd_round and w % 2 == 1)]
        return Plan(workers, {"sitting_out": [w for w in ctx.live if w not in workers]})
