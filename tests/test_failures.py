"""Dead workers and dead parameter servers, with separate OS processes.

Each scenario runs in its own chief process (tests/scenarios/failures.py) against its own
multi-process LocalCluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.cluster

SCENARIOS = os.path.join(REPO, "tests", "scenarios", "failures.py")
#: A scenario starts a cluster (~10 s) and trains for a few seconds.
SCENARIO_TIMEOUT_S = 300


def scenario(name: str, tmp_path, *extra) -> dict:
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    proc = subprocess.run([sys.executable, SCENARIOS, name, str(out), *extra], env=env,
                          capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S)
    assert proc.returncode == 0 and out.exists(), proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_killed_worker_does_not_hang_fit_and_a_restarted_one_rejoins(tmp_path):
    result = scenario("worker", tmp_path)
    first = result["first"]
    # Every task of the first fit ran (the dead worker's moved to live ones) and was applied.
    assert first["tasks"] == first["done"] == first["applied"] == 45
    assert first["live_after"] == [0, 2]
    assert first["iterations"] > 45 // 3  # some rounds had only the 2 live workers
    # After the restart worker 1 is live again and takes its share of tasks.
    assert result["live_end"] == [0, 1, 2]
    assert result["second_tasks_by_worker"]["1"] >= 5


def test_killed_ps_raises_clear_error_and_backup_and_restore_resumes(tmp_path):
    ckpt = str(tmp_path / "backup")
    result = scenario("ps", tmp_path, ckpt)
    assert result["error"]["type"] == "ParameterServerError"
    assert "resume from the last checkpoint" in result["error"]["message"]
    assert "BackupAndRestore" in result["error"]["message"]
    resumed = scenario("resume", tmp_path, ckpt)
    assert resumed["epochs_run"] == 2  # epoch 1 was restored, epochs 2 and 3 ran
    assert resumed["iterations"] == 15  # 5 restored rounds + 10 new ones
