"""The one adapter for TensorFlow's, tf_keras's and Keras 3's private names.

Every reach into a private attribute or a private module of TensorFlow 2.21, tf_keras 2.21 or
Keras 3.15 (closure-queue internals, worker hooks, ``Extended`` internals, variable internals,
tf_keras's data handler and training internals, Keras 3's trainer) is a named function here;
the rest of tf-hetero calls these functions and never touches a private name itself
(``tests/test_layers.py`` checks it). A TensorFlow, tf_keras or Keras upgrade is audited here:
docs/TF_INTERNALS.md maps each function to the source it reads and to the test that fails
when an upgrade breaks it.

Modules, by what they reach:

- :mod:`~tf_hetero.tfcompat.coordinator` -- ``ClusterCoordinator``: the closure queue, worker
  threads, closures and remote values.
- :mod:`~tf_hetero.tfcompat.strategy` -- ``ParameterServerStrategyV2Extended``: the cluster's
  size, variable creation counters, function retracing.
- :mod:`~tf_hetero.tfcompat.keras` -- tf_keras: the data handler, the callback list, the
  optimizer classes, the running ``fit``.
- :mod:`~tf_hetero.tfcompat.keras3` -- Keras 3: the trainer class and its helpers, the
  TensorFlow backend's variable class, the data adapters, the callbacks' default hooks.
- :mod:`~tf_hetero.tfcompat.ops` -- below distribution: the sleep dataset, variable classes,
  device datasets, device scopes, a dataset's batch size, the eager context.
- :mod:`~tf_hetero.tfcompat.variables` -- a PS variable's wrapper and inner variable, optimizer
  slots, checkpoint dependencies: what moving a variable to another PS task reaches.
"""

import importlib

#: Submodules, imported on first use (``tfcompat.keras`` imports tf_keras, ``tfcompat.keras3``
#: Keras 3 when a function of it is called: a module that only needs ``tfcompat.strategy``
#: does not pay for them).
_MODULES = ("coordinator", "keras", "keras3", "ops", "strategy", "variables")
__all__ = list(_MODULES)


def __getattr__(name: str):
    if name in _MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
