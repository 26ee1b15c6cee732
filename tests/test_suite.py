"""The suite's own rules: test modules never import each other or a ``conftest.py`` (what two
of them share lives in tests/support/, fixtures in the conftest files), and the helpers in
tests/support/ hold no tests."""

from __future__ import annotations

import ast
import os

from support import REPO

TESTS = os.path.join(REPO, "tests")


def _python_files():
    for here, subdirs, files in os.walk(TESTS):
        subdirs[:] = [d for d in subdirs if not d.startswith((".", "__"))]
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(here, name)


def _imported(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module


def test_no_test_module_imports_another_test_module_or_a_conftest():
    tests = {os.path.splitext(os.path.basename(p))[0] for p in _python_files()
             if os.path.basename(p).startswith("test_")}
    bad = [f"{os.path.relpath(p, REPO)} imports {name}" for p in _python_files()
           for name in _imported(p)
           if name.split(".")[0] in tests | {"conftest"} or name.startswith("tests.")]
    assert bad == []


def test_the_helpers_hold_no_tests():
    support = os.path.join(TESTS, "support")
    bad = [os.path.relpath(p, REPO) for p in _python_files() if p.startswith(support + os.sep)
           and (os.path.basename(p).startswith("test_")
                or any(isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
                       for n in ast.parse(open(p, encoding="utf-8").read()).body))]
    assert bad == []
