"""What a checkpoint carries of the placement: the PS of each variable an optimizer trains,
saved and restored by one object (:class:`PlacementState`, as Horovod's elastic ``State``).

The state is tracked under each optimizer the rebalancer serves (checkpoint key
:data:`CHECKPOINT_KEY`: the PS of each of the optimizer's variables, in the optimizer's
order, read when the checkpoint is written). ``ModelCheckpoint``, ``BackupAndRestore`` and
``save_weights`` save the optimizer, so they save it. A restore (immediate, or deferred until
the state is tracked at the next fit's first task, as TF restores lazily created slots)
records the saved placement as pending; the rebalancer's next task, at a round boundary,
moves every variable back where it was saved (:meth:`PlacementState.restore`; ``moves``
entries with decision ``"restore"``). Values need nothing: a restore assigns through the
wrapper into whatever inner variable it holds.
"""

from __future__ import annotations

import functools
import json
import weakref

from tf_hetero import tfcompat
from tf_hetero.policies.placement import ps_index
from tf_hetero.tfcompat import variables as tfvars

__all__ = ["PlacementState", "CHECKPOINT_KEY"]

#: The checkpoint key of the placement, under each optimizer.
CHECKPOINT_KEY = "tf_hetero_placement"
#: A Keras 3 optimizer's attribute holding the state its saving hooks write and read.
_KERAS3_OWNER = "_tf_hetero_placement_owner"


@functools.lru_cache(maxsize=1)
def _optimizer_state_class():
    """The checkpointed placement of one optimizer's variables (a ``PythonState``); one class,
    made once, so that a state already tracked can be recognized and re-bound."""
    import tensorflow as tf

    class OptimizerPlacement(tf.train.experimental.PythonState):
        """``{"num_ps": P, "ps": [PS of each variable, None if it cannot move]}``, read from
        and written to ``owner`` (a :class:`PlacementState`; re-bound when the strategy's
        rebalancer changes: TF keeps restoring into the object first tracked under a name,
        even after an ``overwrite``, docs/PSLD.md)."""

        def __init__(self, owner, optimizer):
            self.owner, self._optimizer = owner, weakref.ref(optimizer)

        def serialize(self):
            return self.owner.save(self._optimizer())

        def deserialize(self, string_value):
            optimizer = self._optimizer()
            if optimizer is not None:
                self.owner.load(optimizer, string_value)

    return OptimizerPlacement


class PlacementState:
    """The placement's save/restore object of one rebalancer: what each optimizer's variables'
    PS is (:meth:`save`), what a checkpoint said (:meth:`load`, then :attr:`pending`), and
    the moves back there (:meth:`restore`). ``tracer``: the coordinator's step tracer (its
    accumulators list the optimizers and their variables)."""

    def __init__(self, tracer, num_ps: int):
        self.tracer, self.num_ps = tracer, num_ps
        #: Placements read from a checkpoint, applied at the next task: id -> (optimizer,
        #: saved record).
        self.pending: dict = {}
        self._tracked: dict = {}  # id(optimizer) -> (optimizer, its OptimizerPlacement)

    def placement_of(self, optimizer) -> list:
        """``(variable, PS or None)`` of every variable ``optimizer`` trains, in its order."""
        return [(v, ps_index(v.device) if tfvars.is_ps_variable(v) else None)
                for acc in self.tracer.accumulators if acc.optimizer is optimizer
                for v in acc.variables]

    def save(self, optimizer) -> str:
        """The record a checkpoint keeps for ``optimizer``."""
        return json.dumps({"num_ps": self.num_ps,
                           "ps": [ps for _, ps in self.placement_of(optimizer)]})

    def load(self, optimizer, record: str) -> None:
        """A checkpoint's record for ``optimizer``: pending until :meth:`restore`."""
        self.pending[id(optimizer)] = (optimizer, json.loads(record))

    def track(self) -> None:
        """Tracks the state under every optimizer trained so far (once each; a state an
        earlier rebalancer tracked is re-bound to this one). TF restores a placement a
        checkpoint holds for the optimizer right then (a deferred restore)."""
        cls = _optimizer_state_class()
        for acc in self.tracer.accumulators:
            optimizer = acc.optimizer
            if id(optimizer) in self._tracked:
                continue
            if tfcompat.keras3.is_optimizer(optimizer):
                self.attach_keras3(optimizer)
                continue
            state = tfvars.tracked_child(optimizer, CHECKPOINT_KEY)
            if isinstance(state, cls):
                state.owner = self
            else:
                state = cls(self, optimizer)
                tfvars.track_child(optimizer, state, CHECKPOINT_KEY)
            self._tracked[id(optimizer)] = (optimizer, state)

    def attach_keras3(self, optimizer) -> None:
        """Keras 3 saves ``.keras`` / ``.weights.h5`` files, not TF checkpoints: the record
        goes into the optimizer's own entry of the file, as an attribute beside its variables
        (:func:`~tf_hetero.tfcompat.keras3.write_store_note`), written by its
        ``save_own_variables`` and read by its ``load_own_variables`` (wrapped on this
        optimizer once; re-bound to this state after). Called before anything can load into
        the optimizer: at a fit's start and before ``load_weights``, since a Keras 3 file
        is read once, at the load, with no deferred restore."""
        self._tracked[id(optimizer)] = (optimizer, None)
        owner = getattr(optimizer, _KERAS3_OWNER, None)
        if owner is not None:
            owner[0] = self
            return
        owner = [self]
        ref = weakref.ref(optimizer)
        save, load = optimizer.save_own_variables, optimizer.load_own_variables

        def save_own_variables(store):
            save(store)
            if ref() is not None:
                tfcompat.keras3.write_store_note(store, CHECKPOINT_KEY, owner[0].save(ref()))

        def load_own_variables(store):
            load(store)
            record = tfcompat.keras3.read_store_note(store, CHECKPOINT_KEY)
            if record is not None and ref() is not None:
                owner[0].load(ref(), record)

        object.__setattr__(optimizer, _KERAS3_OWNER, owner)
        object.__setattr__(optimizer, "save_own_variables", save_own_variables)
        object.__setattr__(optimizer, "load_own_variables", load_own_variables)

    def restore(self, move) -> bool:
        """Moves every variable to the PS a restored checkpoint placed it on, each by
        ``move(variable, src, dst)``; returns whether anything moved. A placement that does
        not fit this cluster or model is reported in one line and left (the values were
        restored all the same)."""
        pending, self.pending = list(self.pending.values()), {}
        moved = False
        for optimizer, saved in pending:
            current = self.placement_of(optimizer)
            ps = saved.get("ps", [])
            if len(ps) != len(current) or any(p is not None and p >= self.num_ps for p in ps):
                print(f"[tf-hetero] rebalancing: the checkpoint's placement ({len(ps)} "
                      f"variables on {saved.get('num_ps')} PS) does not fit this model "
                      f"({len(current)} variables) on {self.num_ps} PS; the current placement "
                      "is kept.", flush=True)
                continue
            for (variable, now), want in zip(current, ps):
                if want is None or now is None or now == want:
                    continue
                move(variable, now, want)
                moved = True
        return moved
