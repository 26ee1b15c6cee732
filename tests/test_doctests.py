"""Every module's docstring examples run (collected here, one test per module), and the pure
layers import no TensorFlow."""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys

import pytest

#: Pure modules: importing them must not import TensorFlow.
PURE = [
    "tf_hetero.engine", "tf_hetero.engine.api", "tf_hetero.engine.state",
    "tf_hetero.engine.core", "tf_hetero.engine.local", "tf_hetero.engine.transfer",
    "tf_hetero.engine.folding", "tf_hetero.engine.guard", "tf_hetero.engine.books",
    "tf_hetero.engine.cycle", "tf_hetero.engine.lanes",
    "tf_hetero.policies", "tf_hetero.policies.sync", "tf_hetero.policies.assign",
    "tf_hetero.policies.gate", "tf_hetero.policies.late", "tf_hetero.policies.transfer",
    "tf_hetero.policies.estimate", "tf_hetero.policies.group", "tf_hetero.policies.scale",
    "tf_hetero.policies.diverge", "tf_hetero.policies.rebalance",
    "tf_hetero.policies.rebalance_config", "tf_hetero.policies.ps_rates", "tf_hetero.policies.ps_load",
    "tf_hetero.telemetry.records", "tf_hetero.telemetry.monitor", "tf_hetero.telemetry.perf",
    "tf_hetero.telemetry.tasklog", "tf_hetero.telemetry.psload", "tf_hetero.telemetry.cpu",
    "tf_hetero.policies.placement",
    "tf_hetero.cluster.tf_config", "tf_hetero.cluster.reach", "tf_hetero.emulation.profile",
    "tf_hetero.strategies.registry", "tf_hetero.strategies.runtime.tags",
    "tf_hetero.strategies.config", "tf_hetero.tools.tfjob", "tf_hetero.tflogs",
    "tf_hetero.sim", "tf_hetero.sim.events", "tf_hetero.sim.costs", "tf_hetero.sim.learner",
    "tf_hetero.sim.dispatcher", "tf_hetero.sim.run", "tf_hetero.sim.calibrate",
    "tf_hetero.sim.validate", "tf_hetero.sim.sweep", "tf_hetero.tools.sim", "tf_hetero.patching",
    "tf_hetero.tools.scenarios", "tf_hetero.policies.lr", "tf_hetero.tools.benchconfig",
    "tf_hetero.tools.report", "tf_hetero.policies.noise", "tf_hetero.policies.auto",
]
#: Modules whose examples need TensorFlow (imported, no cluster).
WITH_TF = ["tf_hetero", "tf_hetero.strategies.presets", "tf_hetero.strategies.runtime.fitplan",
           "tf_hetero.strategies.runtime.accumulate", "tf_hetero.strategies.runtime.quantize",
           "tf_hetero.emulation.ps", "tf_hetero.tools.benchrow", "tf_hetero.data",
           "tf_hetero.strategies.runtime.closures", "tf_hetero.strategies.runtime.callbacks",
           "tf_hetero.strategies.runtime.schedule"]


@pytest.mark.parametrize("name", PURE + WITH_TF)
def test_docstring_examples_hold(name):
    module = importlib.import_module(name)
    results = doctest.testmod(module)
    assert results.failed == 0
    if name in PURE and not hasattr(module, "__path__"):  # every pure module shows its use
        assert results.attempted > 0, f"{name}: no examples"


def test_engine_policies_and_telemetry_import_no_tensorflow():
    code = ("import sys; " + "; ".join(f"import {m}" for m in PURE) +
            "; bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tf_keras')];"
            " print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
