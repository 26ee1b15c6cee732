"""`tf-hetero sim`: it writes the bench's outputs (JSON, table, figure) without importing
TensorFlow, and explains bad options."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tf_hetero.sim import validate

MEASURED = {os.path.splitext(os.path.basename(p))[0]: p for p in validate.measured_files()}


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tf_hetero", "sim", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_sim_command_writes_the_bench_outputs_without_tensorflow(tmp_path):
    out = tmp_path / "a.json"
    code = ("import sys; from tf_hetero.tools.cli import main; "
            f"code = main(['sim', '--strategies', 'bsp,hps', '--tasks', '40', "
            f"'--steps-per-epoch', '20', '--json', {str(out)!r}]); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tf_keras')]; "
            "sys.exit(code or (3 if bad else 0))")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    with open(MEASURED["one_slow"]) as f:
        measured = {r["strategy"]: r for r in json.load(f)["results"]}
    for row in data["results"]:  # every key the bench gives the row (stock PSS has fewer)
        assert {k for k, v in measured[row["strategy"]].items() if v is not None} <= set(row)
    assert [r["strategy"] for r in data["results"]] == ["pss", "bsp", "hps"]
    assert (tmp_path / "a.md").read_text().count("| bsp |") == 2  # table and breakdown
    assert (tmp_path / "a.png").exists()


@pytest.mark.parametrize("args, message", [
    (["--workers", "4,x"], r"--workers '4,x': need whole numbers >= 1"),
    (["--strategies", "nosuch"], r"Unknown strategy 'nosuch'"),
    (["--calibrate", "missing.json"], r"cannot read bench JSON 'missing.json'"),
    (["--costs", "missing.json"], r"calibration file 'missing.json' does not exist"),
])
def test_sim_command_explains_bad_options(tmp_path, args, message):
    import re

    p = _cli(*args, cwd=tmp_path)
    assert p.returncode == 2
    assert re.search(message, p.stderr), p.stderr
