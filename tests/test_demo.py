"""`tf-hetero demo` on its default cluster shape (4 workers, 2 PS, worker 3 4x slower,
separate processes), with a short training run."""

from __future__ import annotations

import json

import pytest

from conftest import cli

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    import os

    out = tmp_path_factory.mktemp("demo")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    proc = cli("demo", "--epochs", "2", "--steps-per-epoch", "40", "--out-dir", str(out), env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout, out, json.loads((out / "demo.json").read_text())


def test_demo_prints_per_worker_table_and_summary(demo):
    stdout, _, _ = demo
    for header in ("| worker |", "measured ratio", "samples/s", "efficiency", "test accuracy"):
        assert header in stdout
    assert "[tf-hetero] epoch 2/2 done" in stdout


def test_demo_measured_slowdown_matches_profile(demo):
    _, _, result = demo
    assert result["slowdowns"] == [1.0, 1.0, 1.0, 4.0]
    assert result["measured_ratio"][3] == pytest.approx(4.0, rel=0.15)
    assert sum(result["tasks"]) == 80


def test_demo_writes_png_json_and_markdown(demo):
    _, out, result = demo
    png = (out / "demo.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "| worker |" in (out / "demo.md").read_text()
    assert 0 < result["efficiency"] <= 1.2 and 0 <= result["accuracy"] <= 1
