"""Task codes: the int64 first argument of every accumulating task, which tells it, when it
starts, its round, its accumulator slot, its push flags, its size and its lane (the engine
decides them only then: ``runtime/workers.py`` sets the code as the closure starts).

>>> task_code(3, lane=5, size=2) > 0, task_code(-1) == NO_ROUND
(True, True)
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["task_code", "decode_code", "decode_size", "LANE_CODE", "PUSH_CODE", "SIZE_CODE",
           "NO_ROUND"]

#: A task's code packs its round, its accumulator slot, its push flags (local accumulation,
#: see :mod:`tf_hetero.strategies.runtime.local_push`), its size (granules of samples its
#: step reads, sized strategies) and, optionally, the lane it writes:
#: ``code = (((round * 2 + slot) * PUSH_CODE + push) * SIZE_CODE + size - 1) * LANE_CODE
#: + lane + 1`` (``+ 0``: the lane of the worker that runs it). A negative code writes nothing
#: (its round closed before it started).
LANE_CODE = 1024
PUSH_CODE = 8  # push flags (PUSH_OLD, PUSH_ALL) and the OVERWRITE write flag
SIZE_CODE = 4096
#: The code of a task whose round closed before it started: it writes nothing.
NO_ROUND = -1


def task_code(round_id: int, lane: int | None = None, push: int = 0,
              slot: int | None = None, size: int = 1) -> int:
    """The task code of a task of ``round_id`` (``-1``: writes nothing). ``slot`` is the
    round's accumulator slot (its book alternates them; default ``round_id % 2``).

    >>> task_code(3), task_code(3, lane=5), task_code(3, push=2), task_code(3, slot=0)
    (234881024, 234881030, 243269632, 201326592)
    >>> task_code(3, size=5) - task_code(3) == 4 * LANE_CODE
    True
    >>> task_code(-1)
    -1
    """
    if round_id < 0:
        return NO_ROUND
    if not 1 <= size <= SIZE_CODE:
        raise ValueError(f"task size {size}: need 1 to {SIZE_CODE} granules.")
    slot = round_id % 2 if slot is None else slot
    return ((((round_id * 2 + slot) * PUSH_CODE + push) * SIZE_CODE + size - 1) * LANE_CODE
            + (0 if lane is None else lane + 1))


def decode_code(code: tf.Tensor):
    """In a task: ``(round, slot, push flags, lane)`` of an int64 task code (lane -1: the
    running worker's own)."""
    round_slot = tf.math.floordiv(code, LANE_CODE * SIZE_CODE * PUSH_CODE)
    push = tf.math.floormod(tf.math.floordiv(code, LANE_CODE * SIZE_CODE), PUSH_CODE)
    return (tf.math.floordiv(round_slot, 2), tf.math.floormod(round_slot, 2), push,
            tf.math.floormod(code, LANE_CODE) - 1)


def decode_size(code: tf.Tensor) -> tf.Tensor:
    """In a task: the granules its step reads (int64; 1 for a task that writes nothing)."""
    size = tf.math.floormod(tf.math.floordiv(code, LANE_CODE), SIZE_CODE) + 1
    return tf.where(code >= 0, size, tf.constant(1, tf.int64))
