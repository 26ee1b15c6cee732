"""Closures of one function on the same argument objects, built once and then copied.

``model.fit`` schedules its step once per step, always with the same argument objects (the
per-worker iterator; tf-hetero's accumulating variant adds the cached ``NO_ROUND`` code
tensor). Each stock ``Closure(fn, ...)`` looks ``fn``'s concrete function up in its tracing
cache (argument specs canonicalised and hashed), converts its outputs to a signature and
checks the arguments for remote values: measured with ``py-spy --gil`` on the chief of a
4-worker H-PS bench, building closures was 54% of the time the fit thread held the GIL
(docs/MEASUREMENT.md, "What a task pays beyond its device time"), and the worker threads
that launch a round's tasks and the thread that applies it wait for the GIL. A closure
built for the same function on the same argument objects is the same closure but for its
output and its tag: a shallow copy of it, made before either was set, is one, as long as
the queue's cancellation manager is the one it was built with: TF replaces the manager when
it cancels every closure after a failure, and a closure's function is bound to its
manager, so the manager is part of the key.

Only arguments whose identity fixes the trace are trusted: tensors (traced by dtype and
shape) and per-worker values (iterators, per-worker resources). Anything else (Python
values, containers that could change under the same identity, keyword arguments) builds a
closure the stock way. A copy never outlives a re-trace: :meth:`ClosureCache.clear` is
called when a rebalancing move drops the traced functions (:mod:`rebalance`).

>>> import types
>>> cache = ClosureCache()
>>> class Fn:  # stands in for a tf.function (weakly referenced, like one)
...     pass
>>> fn, built = Fn(), types.SimpleNamespace(_output_remote_value_ref=None)
>>> manager, args = object(), (tf.constant(1),)
>>> cache.copy_of(fn, args, None, manager) is None
True
>>> cache.keep(fn, args, None, manager, built)
>>> copy = cache.copy_of(fn, args, None, manager)
>>> copy is not built, copy._output_remote_value_ref
(True, None)
>>> cache.copy_of(fn, (tf.constant(1),), None, manager) is None   # another argument object
True
>>> cache.copy_of(fn, args, None, object()) is None   # closures were cancelled since
True
>>> cache.keep(fn, ([1, 2],), None, manager, built)
>>> cache.copy_of(fn, ([1, 2],), None, manager) is None   # a list could change in place
True
"""

from __future__ import annotations

import copy
import threading
import weakref

import tensorflow as tf

from tf_hetero import tfcompat

__all__ = ["ClosureCache"]

#: Argument types whose object identity fixes the function's trace.
_TRUSTED = (tf.Tensor, tfcompat.coordinator.PerWorkerValues)


def _key(args, kwargs, manager) -> tuple | None:
    """The identities of the cancellation manager and ``args``, or ``None`` if a copy cannot
    be trusted for them."""
    if kwargs:
        return None
    args = tuple(args or ())
    if not all(isinstance(a, _TRUSTED) for a in args):
        return None
    return (id(manager),) + tuple(id(a) for a in args)


class ClosureCache:
    """The last closure built for each function, kept unused, with the identities of its
    arguments and cancellation manager (held alive by the kept closure and its function, so
    an identity cannot be reused while it is kept)."""

    def __init__(self):
        self._kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def copy_of(self, fn, args, kwargs, manager):
        """A fresh closure of ``fn`` on ``args`` under cancellation manager ``manager``,
        copied from the one kept, or ``None``."""
        key = _key(args, kwargs, manager)
        if key is None:
            return None
        with self._lock:
            kept = self._kept.get(fn)
        if kept is None or kept[0] != key:
            return None
        return copy.copy(kept[1])

    def keep(self, fn, args, kwargs, manager, closure) -> None:
        """Keeps a copy of ``closure``, just built for ``fn`` on ``args`` under ``manager``
        (before its output or tag was set), for the next closures of ``fn`` on the same
        argument objects under the same manager."""
        key = _key(args, kwargs, manager)
        if key is None:
            return
        if tfcompat.coordinator.output_built(closure):
            raise ValueError("keep() needs a closure whose output was not built yet.")
        kept = copy.copy(closure)
        # The copies call the function with their inputs flattened once (FlatCaller): the
        # stock call binds and casts them against the signature at every launch.
        tfcompat.coordinator.call_flat(kept, manager)
        with self._lock:
            self._kept[fn] = (key, kept)

    def clear(self) -> None:
        """Forgets every kept closure (their functions were traced on an old placement)."""
        with self._lock:
            self._kept = weakref.WeakKeyDictionary()
