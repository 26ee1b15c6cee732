"""Every module's docstring examples hold, and the pure modules import no TensorFlow.

The one doctest collector of the suite: it finds the modules itself (every module of the
installed packages whose source holds a ``>>>`` example, from tests/support/layers.py), plus
the examples that live outside the package (:data:`OUTSIDE`). The one no-TensorFlow check:
every module :data:`support.layers.PURE` covers, imported in a fresh interpreter.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import os
import subprocess
import sys

import pytest

from support import REPO
from support.layers import has_examples, is_package, modules, pure_modules

#: Modules whose examples show a use that needs what a unit test does not start (a cluster, a
#: whole demo run); they are illustrations, not run. Each names why.
ILLUSTRATIONS = {
    "tf_hetero.cluster.local": "starts a 4-worker cluster (tests/cluster/ start real ones)",
    "tf_hetero.cluster.roles": "serves on a cluster from TF_CONFIG",
    "tf_hetero.strategies.base": "a fit on a cluster resolver",
    "tf_hetero.models": "the module's names imported as M, a sketch",
    "tf_hetero.tools.demo": "runs the demo's fits (~50 s; tests/tools/test_demo.py runs it)",
}

#: Examples outside the package: files (relative to the repository) run as modules.
OUTSIDE = ["benchmarks/contract_matrix.py", "tests/support/toy_policy.py",
           "tests/support/__init__.py"]

PURE = pure_modules()
EXAMPLES = [m for m in modules() if has_examples(m) and m not in ILLUSTRATIONS]


def test_every_illustration_is_a_module_with_examples():
    assert all(has_examples(m) for m in ILLUSTRATIONS), ILLUSTRATIONS


@pytest.mark.parametrize("name", [m if m in PURE else pytest.param(m, marks=pytest.mark.tensorflow)
                                  for m in EXAMPLES])
def test_docstring_examples_hold(name):
    results = doctest.testmod(importlib.import_module(name))
    assert results.failed == 0


@pytest.mark.parametrize("name", [m for m in PURE if not is_package(m)])
def test_every_pure_module_shows_its_use_in_examples(name):
    assert name in EXAMPLES and doctest.testmod(importlib.import_module(name)).attempted > 0, \
        f"{name}: no examples"


@pytest.mark.parametrize("path", OUTSIDE)
def test_examples_outside_the_package_hold(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = doctest.testmod(module)
    assert results.failed == 0 and results.attempted > 0


def test_the_pure_modules_import_no_tensorflow():
    code = ("import sys; " + "; ".join(f"import {m}" for m in PURE) +
            "; bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tf_keras')];"
            " print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
