"""The round engine: pure Python (no TensorFlow), thread-safe.

- :mod:`~tf_hetero.engine.api`: the contracts (Dispatcher, policy Protocols, Plan,
  RoundContext, GroupContext and the rule for groups, Component hooks);
- :mod:`~tf_hetero.engine.state`: Task, Round, Book and their state enums;
- :mod:`~tf_hetero.engine.core`: :class:`RoundEngine`, the core (queue, liveness, rounds,
  dispatch); :mod:`~tf_hetero.engine.cycle`, its round cycle (plan, open, hand out, close);
  :mod:`~tf_hetero.engine.books`, the books (formed, checked, re-formed between rounds);
  :mod:`~tf_hetero.engine.lanes`, which lane each task writes and which an apply reads;
- :mod:`~tf_hetero.engine.guard`: the divergence check of applied rounds (the default
  :class:`~tf_hetero.engine.api.RoundGuard`);
- components: :mod:`~tf_hetero.engine.local` (H-PS local accumulation),
  :mod:`~tf_hetero.engine.transfer` (EPSP task transfer), :mod:`~tf_hetero.engine.folding`
  (EPSP slack late-gradient folding).

See docs/ARCHITECTURE.md for the life of a step and the locking rules.
"""

from tf_hetero.engine.api import (AssignmentPolicy, Component, Dispatcher, Gate, GroupContext,
                                  GroupingPolicy, LatePolicy, Plan, Pulled, RoundContext,
                                  RoundGuard, SyncPolicy, TransferPolicy, UpdateScale,
                                  normalize_groups)
from tf_hetero.engine.core import EngineError, RoundEngine
from tf_hetero.engine.folding import LateFolding
from tf_hetero.engine.guard import DivergenceError, DivergenceGuard
from tf_hetero.engine.local import LocalAccumulation
from tf_hetero.engine.state import (OVERWRITE, PUSH_ALL, PUSH_OLD, Book, Round, RoundKind,
                                    Task, TaskState)
from tf_hetero.engine.transfer import TaskTransfer

__all__ = ["RoundEngine", "EngineError", "Task", "Round", "Book", "TaskState", "RoundKind",
           "PUSH_OLD", "PUSH_ALL", "OVERWRITE", "Dispatcher", "SyncPolicy", "AssignmentPolicy",
           "Gate", "LatePolicy", "TransferPolicy", "GroupingPolicy", "UpdateScale", "RoundGuard",
           "Plan", "Pulled", "RoundContext", "GroupContext", "normalize_groups", "Component",
           "LocalAccumulation", "TaskTransfer", "LateFolding", "DivergenceGuard",
           "DivergenceError"]
