"""Wrapping a function of TensorFlow or tf_keras, once per process.

tf-hetero changes a few things TF and tf_keras do by wrapping one of their module functions or
methods (each named, with why, where it is wrapped: ``strategies/runtime/fitplan.py``,
``strategies/runtime/callbacks.py``, ``strategies/runtime/granules.py``,
``strategies/runtime/remake.py``, ``strategies/runtime/errors.py``,
:func:`tf_hetero.data.device_datasets_without_autotune`;
docs/TF_INTERNALS.md, "Auditing an upgrade"). Each is installed by every strategy that is made,
so the wrap must happen once: a second wrap would run the change twice per call.

>>> import types
>>> owner = types.SimpleNamespace(f=lambda x: x + 1)
>>> def twice(original):
...     return lambda x: 2 * original(x)
>>> wrap_once(owner, "f", twice), wrap_once(owner, "f", twice)
(True, False)
>>> owner.f(1), owner.f.__wrapped__(1)
(4, 2)
>>> wrapped_with(owner.f, twice), wrapped_with(owner.f.__wrapped__, twice)
(True, False)
"""

from __future__ import annotations

import threading
from typing import Any, Callable

__all__ = ["wrap_once", "wrapped_with"]

_lock = threading.Lock()
_MARK = "_tf_hetero_wraps"


def wrap_once(owner: Any, name: str, make: Callable[[Callable], Callable]) -> bool:
    """Replaces ``owner.name`` (a module's function, a class's method) by ``make(original)``,
    unless an earlier call already wrapped it with ``make``. The wrapper keeps the original
    as ``__wrapped__``. Returns whether it wrapped. Thread-safe."""
    key = _key(make)
    with _lock:
        current = getattr(owner, name)
        if key in getattr(current, _MARK, ()):
            return False
        wrapper = make(current)
        wrapper.__wrapped__ = current
        setattr(wrapper, _MARK, getattr(current, _MARK, ()) + (key,))
        setattr(owner, name, wrapper)
        return True


def wrapped_with(function: Callable, make: Callable) -> bool:
    """Is ``function`` a wrapper :func:`wrap_once` made with ``make`` (or wraps one)?"""
    return _key(make) in getattr(function, _MARK, ())


def _key(make) -> str:
    return f"{getattr(make, '__module__', '')}.{getattr(make, '__qualname__', repr(make))}"
