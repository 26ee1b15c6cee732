"""The seams through which heterogeneity emulation reaches the production path.

The strategies and their runtime call these hooks at the few points where an emulated
device, link or PS task must act (a step's compute, a push sent outside a step); by default
they do nothing. :func:`tf_hetero.emulate` installs the emulator's versions. So the
production path never imports the emulator (``tests/test_layers.py`` forbids it), and a
strategy trained without ``emulate`` runs exactly the code it runs on real hardware.

- :class:`StepHooks` -- asked while a training step is traced (process-wide: the emulator
  knows which step is being traced, per thread): :meth:`~StepHooks.finish_compute` and
  :meth:`~StepHooks.keep_gradient_local`. Installed by :func:`install_step_hooks`.
- :class:`PushHook` -- a strategy's ``push_hook``: what a push of buffered gradients waits
  for before it writes to the PS tasks (an emulated link, emulated PS service).
- :data:`DEFERS_UPDATE` -- the mark on an ``apply_gradients`` that leaves the update to a
  round's apply: an emulated step then does not hold the update to the end of its time.

>>> step_hooks().finish_compute(after=[]) is None       # nothing installed: no emulation
True
>>> PushHook().wait(worker=0, variables=[], payload_bytes=[], deps=["d"], sent=["s"])
['d']
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["DEFERS_UPDATE", "StepHooks", "PushHook", "step_hooks", "install_step_hooks"]

#: Attribute set (to True) on an ``apply_gradients`` whose update a round applies later.
DEFERS_UPDATE = "_tf_hetero_defers_update"


class StepHooks:
    """What a training step being traced asks of the emulator. The default: no emulation."""

    def finish_compute(self, after, extra_us: int = 0):
        """An op that ends once the step's emulated compute time (plus ``extra_us``) has
        passed after ``after`` (tensors) is computed, or ``None`` outside an emulated step:
        work that must follow the compute (a push) depends on it."""
        return None

    def keep_gradient_local(self) -> None:
        """This step's gradient stays on its worker (a buffer): the emulator charges no
        per-step push over the link or to the PS tasks; the buffer's push is charged."""


class PushHook:
    """What a push of a worker's buffered gradients waits for before its bytes reach the PS
    tasks. The default: nothing (real hardware)."""

    def wait(self, worker, variables: Sequence, payload_bytes: Sequence[int], deps: list,
             sent: list) -> list:
        """The ops the push's PS writes must follow. ``worker``: the pushing worker (int64
        tensor); ``variables`` and ``payload_bytes``: each pushed variable and its payload
        size; ``deps``: what the push already follows; ``sent``: the payload tensors."""
        return deps


_step = StepHooks()


def step_hooks() -> StepHooks:
    """The installed :class:`StepHooks` (the no-op default unless emulation installed its)."""
    return _step


def install_step_hooks(hooks: StepHooks) -> None:
    """Installs ``hooks`` for the whole process (idempotent for the same object)."""
    global _step  # pylint: disable=global-statement
    _step = hooks
