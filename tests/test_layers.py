"""The package's layers hold: every import (function-level ones included) points down the
layer table of docs/ARCHITECTURE.md, no two modules import each other (directly or round a
cycle), TensorFlow's and tf_keras's private names are reached only from
``tf_hetero/tfcompat/``, and the environment is read only in ``tf_hetero/env.py``.

The checks parse the source (``ast``; tests/support/layers.py holds the layer table and the
parser); nothing is imported. Each check is also run on a doctored tree (one upward import,
one cycle, one private reach, one environment read added) to show it fails when the rule is
broken.
"""

from __future__ import annotations

from support.layers import (cycles, environment_reads, layer_of, private_reaches, sources,
                            upward_imports)


# -- the checks, on the tree ---------------------------------------------------------------

def test_every_module_is_in_a_layer():
    for mod in sources():
        layer_of(mod.rstrip("/"))


def test_no_module_imports_from_a_layer_above_its_own():
    assert upward_imports(sources()) == []


def test_no_import_cycles():
    assert cycles(sources()) == []


def test_tensorflow_private_names_are_reached_only_through_the_adapter():
    assert private_reaches(sources()) == []


def test_the_environment_is_read_only_in_tf_hetero_env():
    assert environment_reads(sources()) == []


# -- the checks fail when a rule is broken -----------------------------------------------------

def test_the_layer_check_finds_an_upward_import_even_inside_a_function():
    srcs = dict(sources())
    srcs["tf_hetero.engine.core"] += "\ndef _late():\n    from tf_hetero.policies import sync\n"
    srcs["tf_hetero.sim.run"] += "\nfrom tf_hetero.tools import bench\n"
    found = upward_imports(srcs)
    assert any(f.startswith("tf_hetero.engine.core:") and "tf_hetero.policies.sync" in f
               and "upward" in f for f in found), found
    assert any(f.startswith("tf_hetero.sim.run:") and "tf_hetero.tools.bench" in f
               for f in found), found


def test_the_cycle_check_finds_two_modules_importing_each_other():
    srcs = dict(sources())
    srcs["tf_hetero.emulation.device"] += "\ndef _a():\n    from tf_hetero.emulation import ps\n"
    srcs["tf_hetero.emulation.ps"] += "\ndef _b():\n    from tf_hetero.emulation import device\n"
    assert ["tf_hetero.emulation.device", "tf_hetero.emulation.ps"] in cycles(srcs)


def test_the_adapter_and_environment_checks_find_a_reach():
    srcs = dict(sources())
    srcs["tf_hetero.strategies.base"] += (
        "\nimport os\nfrom tensorflow.python.distribute import values\n"
        "x = os.environ.get('X')  # pylint: disable=protected-access\n")
    assert any("tensorflow.python.distribute" in f for f in private_reaches(srcs))
    assert any(f.startswith("tf_hetero.strategies.base:") for f in environment_reads(srcs))
