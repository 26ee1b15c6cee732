"""The notebooks' install cell, run as Colab would run it (no network), and a notebook's
outputs free of TensorFlow's C++ log lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import REPO

NOTEBOOKS = ("quickstart.ipynb", "epsp.ipynb", "hps.ipynb", "grouped.ipynb", "casp.ipynb",
             "psld.ipynb", "keras3.ipynb")

#: Runs a cell's code in IPython, as a notebook would, with ``google.colab`` importable.
RUN_CELL = """
import sys, types
sys.modules["google.colab"] = types.ModuleType("google.colab")
from IPython.core.interactiveshell import InteractiveShell
result = InteractiveShell.instance().run_cell(open(sys.argv[1]).read())
sys.exit(0 if result.success else 1)
"""


def install_cell(name: str) -> str:
    with open(os.path.join(REPO, "colab", name)) as f:
        nb = json.load(f)
    cells = [c for c in nb["cells"] if "install" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{name} needs exactly one cell tagged 'install'"
    return "".join(cells[0]["source"])


def run_in_colab(name: str, tmp_path, **env_extra) -> tuple[int, list[str]]:
    cell = tmp_path / "cell.py"
    cell.write_text(install_cell(name))
    env = {k: v for k, v in os.environ.items() if k != "TF_HETERO_PIP_SPEC"}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", RUN_CELL, str(cell)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return proc.returncode, lines


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_install_cell_without_a_source_stops_with_one_clear_line(name, tmp_path):
    code, lines = run_in_colab(name, tmp_path)
    assert code != 0, "the cell must stop the notebook when there is nothing to install"
    assert len(lines) == 1, lines
    assert lines[0].startswith("tf-hetero install: no source set. Fix: set TF_HETERO_PIP_SPEC")
    assert "make wheel" in lines[0]


def test_install_cell_names_the_source_pip_could_not_install(tmp_path):
    missing = str(tmp_path / "nowhere" / "tf_hetero-0.1.0-py3-none-any.whl")
    code, lines = run_in_colab("quickstart.ipynb", tmp_path, TF_HETERO_PIP_SPEC=missing)
    assert code != 0
    assert lines[0].startswith(f"installing tf-hetero from {missing}")
    assert len(lines) == 2 and lines[1].startswith(f"tf-hetero install: pip could not install "
                                                   f"{missing!r}"), lines


def test_install_cell_outside_colab_installs_nothing(tmp_path):
    cell = tmp_path / "cell.py"
    cell.write_text(install_cell("epsp.ipynb"))
    env = {k: v for k, v in os.environ.items() if k != "TF_HETERO_PIP_SPEC"}
    proc = subprocess.run([sys.executable, str(cell)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


@pytest.mark.cluster
def test_notebook_outputs_carry_no_tensorflow_log_lines(tmp_path, monkeypatch):
    """Run with neither TF_CPP_MIN_LOG_LEVEL nor TF_HETERO_TF_LOGS set, as a user would."""
    from tf_hetero.tflogs import TF_LOG_LINE

    from support.notebooks import SMALL, outputs, run_notebook

    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.delenv("TF_HETERO_TF_LOGS", raising=False)
    nb = run_notebook("quickstart.ipynb", SMALL["quickstart.ipynb"], str(tmp_path))
    text = "".join(o.get("text", "") for o in outputs(nb, "stream"))
    assert "epoch 1/1 done" in text
    noise = [line for line in text.splitlines() if TF_LOG_LINE.search(line)]
    assert not noise, noise[:5]
