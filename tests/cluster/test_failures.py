"""Dead workers and dead parameter servers, with separate OS processes.

Each scenario runs in its own chief process (tests/support/scenarios/failures.py) against
its own multi-process LocalCluster; the chief is forked from a process that imported
TensorFlow once (the ``chiefs`` fixture, tests/support/zygote.py)."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest

from support import REPO

pytestmark = pytest.mark.cluster

SCENARIOS = os.path.join(REPO, "tests", "support", "scenarios", "failures.py")
#: A scenario starts a cluster (~10 s) and trains for a few seconds.
SCENARIO_TIMEOUT_S = 300


def scenario(chiefs, name: str, tmp_path, *extra) -> dict:
    """Runs a failure scenario in a chief of its own, forked from ``chiefs`` (the
    ``chiefs`` fixture: :class:`support.zygote.Zygote`)."""
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    proc = chiefs.run(SCENARIOS, [name, out, *extra], env, SCENARIO_TIMEOUT_S, str(tmp_path))
    assert proc.returncode == 0 and out.exists(), proc.stderr[-4000:]
    return json.loads(out.read_text())


def inexact(result: dict) -> str:
    """An inexact fit's clues, in full (pytest would cut the dict short): each variable's
    difference and device, the failover's events and the rounds."""
    keys = ("diffs", "events", "iterations", "applied", "copies", "rounds", "sizes", "losses")
    return json.dumps({k: result.get(k) for k in keys})


def test_killed_worker_does_not_hang_fit_and_a_restarted_one_rejoins(chiefs, tmp_path):
    result = scenario(chiefs, "worker", tmp_path)
    first = result["first"]
    # Every task of the first fit ran (the dead worker's moved to live ones) and was applied.
    assert first["tasks"] == first["done"] == first["applied"] == 45
    assert first["live_after"] == [0, 2]
    assert first["iterations"] > 45 // 3  # some rounds had only the 2 live workers
    # After the restart worker 1 is live again and takes its share of tasks.
    assert result["live_end"] == [0, 1, 2]
    assert result["second_tasks_by_worker"]["1"] >= 5


@pytest.mark.parametrize("flavour", ["tf_keras", "keras3"])
def test_killed_ps_raises_clear_error_and_backup_and_restore_resumes(chiefs, tmp_path, flavour):
    """BSP; the PS killed once epoch 1 was saved: the next epoch's first op on it raises the
    clear error, and a new cluster's fit resumes at epoch 2 with the saved iterations (a Keras
    3 model: Keras 3's BackupAndRestore, through the Keras 3 loop)."""
    ckpt = str(tmp_path / "backup")
    extra = [flavour] if flavour == "keras3" else []
    result = scenario(chiefs, "ps", tmp_path, ckpt, *extra)
    assert result["error"]["type"] == "ParameterServerError"
    assert "resume from the last checkpoint" in result["error"]["message"]
    assert "BackupAndRestore" in result["error"]["message"]
    resumed = scenario(chiefs, "resume", tmp_path, ckpt, *extra)
    assert resumed["epochs_run"] == 2  # epoch 1 was restored, epochs 2 and 3 ran
    assert resumed["iterations"] == 15  # 5 restored rounds + 10 new ones


def test_two_ps_killed_mid_fit_fail_over_and_the_fit_ends_exact(chiefs, tmp_path):
    """BSP, 3 PS tasks (PS 2 standing by), copies every 4 applied rounds, every worker reading
    the same batch, so every round is one SGD step on it. PS 1 killed after 6 applied rounds
    (its variables go to PS 2) and its process started again on its address; at the next
    epoch's end it rejoins as a standby, and when PS 2 dies its variables go back to PS 1.
    The fit ends in the same process on PS 0 and 1, its weights equal to a local model's
    after ``optimizer.iterations`` SGD steps with momentum from the same initial weights: one
    consistent model (a survivor left a round ahead, or a variable not restored from the
    copy, would differ). Without the failover the fit raises ParameterServerError
    (test_killed_ps_raises_clear_error_...); without the rejoin PS 2's variables go to the
    surviving PS 0, and the test fails on the target."""
    result = scenario(chiefs, "failover", tmp_path, "bsp", "rejoin")
    assert result["error"] is None, result["error"]
    assert result["killed"] == [1, 2] and result["rejoined"] == [1]
    first, second = result["events"]
    assert (first["dead"], first["target"]) == (1, 2) and first["moved"] > 0
    assert (second["dead"], second["target"]) == (2, 1) and second["moved"] > 0
    assert result["devices_after"] == ["/job:ps/replica:0/task:0/device:CPU:0",
                                       "/job:ps/replica:0/task:1/device:CPU:0"]
    assert all(math.isfinite(x) for x in result["losses"])
    # Every round applied counts in optimizer.iterations but the rolled-back ones.
    rolled_back = first["rolled_back"] + second["rolled_back"]
    assert result["iterations"] == result["applied"] - rolled_back > 12
    assert result["max_diff"] <= 1e-5 * max(1.0, result["max_weight"]), inexact(result)


def test_an_asp_fit_fails_over_twice_and_ends_exact(chiefs, tmp_path):
    """ASP (no rounds: each step applies its own update) on one worker, whose steps follow
    one another: PS 1 killed after 6 steps, PS 0 six steps after that failover, both onto PS
    2. The copies are taken between two steps, so the fit ends exact: its weights equal a
    local model's after ``iterations`` steps, and ``iterations`` = steps applied - steps
    rolled back (a step run twice, or one lost without being counted, would differ).
    Without ASP's failover (``set_failover`` refused it before) the first death raises
    ParameterServerError and the test fails."""
    result = scenario(chiefs, "failover", tmp_path, "asp:1", "2")
    assert result["error"] is None, result["error"]
    assert result["killed"] == [1, 0]
    first, second = result["events"]
    assert (first["dead"], first["target"]) == (1, 2) and first["moved"] > 0
    assert (second["dead"], second["target"]) == (0, 2) and second["moved"] > 0
    assert result["devices_after"] == ["/job:ps/replica:0/task:2/device:CPU:0"]
    assert len(result["losses"]) == 2 and all(math.isfinite(x) for x in result["losses"])
    # Every update applied counts in optimizer.iterations but the rolled-back ones.
    rolled_back = first["rolled_back"] + second["rolled_back"]
    assert result["iterations"] == result["applied"] - rolled_back
    assert result["iterations"] > 12  # updates were applied after each failover
    assert result["max_diff"] <= 1e-5 * max(1.0, result["max_weight"]), inexact(result)


@pytest.mark.parametrize("strategy,kill", [("bsp", "move"), ("epsp", "worker"),
                                           ("bsp", "epoch")])
def test_a_ps_killed_in_a_move_with_a_worker_or_between_epochs_fails_over(chiefs, tmp_path,
                                                                         strategy, kill):
    """``move``: live rebalancing on, PS 1 killed as ``scale_ps([0, 2])``'s first variable
    move starts, on fit's thread (without the failover taking a death met there, the fit
    raises ParameterServerError); BSP's weights then equal the local replay's. ``epoch``:
    PS 1 killed after epoch 1's join, nothing running (without ``join`` probing the PS
    tasks, Keras's own chief ops meet the death and the fit raises ParameterServerError);
    exact afterwards. ``worker``:
    worker 1 killed with PS 1 (without each live worker's input iterators made again, a
    step cancelled in its ``IteratorGetNext`` leaves its iterator ended and the fit fails
    with a cancelled ``RemoteValue``); EPSP goes on on workers 0 and 2."""
    result = scenario(chiefs, "failover", tmp_path, strategy, kill)
    assert result["error"] is None, result["error"]
    assert result["killed"] == [1]
    (event,) = result["events"]
    assert (event["dead"], event["target"]) == (1, 2) and event["moved"] > 0
    assert result["iterations"] == result["applied"] - event["rolled_back"]
    assert result["iterations"] > 6  # rounds were applied after the failover
    if kill == "worker":
        assert result["live_workers"] == [0, 2]
    else:
        assert result["max_diff"] <= 1e-5 * max(1.0, result["max_weight"]), inexact(result)


def test_a_keras3_fit_fails_over(chiefs, tmp_path):
    """The same scenario with the model in Keras 3 (``tf_hetero.keras3``): H-PS, PS 1 killed
    mid-fit; the fit goes on, and its weights equal a local Keras 3 replay of
    ``iterations`` steps (a variable of Keras 3's optimizer left out of the copy, or not
    restored, would differ)."""
    result = scenario(chiefs, "failover", tmp_path, "hps", "1", "keras3")
    assert result["error"] is None, result["error"]
    (event,) = result["events"]
    assert event["dead"] == 1 and event["moved"] > 0
    assert result["iterations"] == result["applied"] - event["rolled_back"] > 6
    assert result["max_diff"] <= 1e-5 * max(1.0, result["max_weight"]), inexact(result)


# ---------------------------------------------------------------- chaos, any strategy
# The full strategy x scenario matrix runs in benchmarks/chaos.py (results in
# benchmarks/results/chaos/); here a small representative subset: H-PS (sized tasks, local
# accumulation) and EPSP slack (deadlines, late folding, task transfer).
CHAOS = os.path.join(REPO, "tests", "support", "scenarios", "chaos.py")
CHAOS_STRATEGIES = ["hps", "epspslack"]  # PS kill + resume
#: A chaos scenario: cluster start ~10 s, a fit of ~20-30 s with 3 kills and restarts.
CHAOS_TIMEOUT_S = 240


def chaos_judge():
    sys.path.insert(0, os.path.dirname(CHAOS))
    try:
        import chaos  # tests/support/scenarios/chaos.py: pure checks, imports no TensorFlow
    finally:
        sys.path.pop(0)
    return chaos


def chaos_run(chiefs, kind: str, strategy: str, tmp_path, *extra) -> dict:
    out = tmp_path / f"{kind}-{strategy}.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CHAOS_DUMP_AFTER_S=str(CHAOS_TIMEOUT_S - 20))
    env.pop("TF_CONFIG", None)
    proc = chiefs.run(CHAOS, [kind, strategy, out, *extra], env, CHAOS_TIMEOUT_S, str(tmp_path))
    assert proc.returncode == 0 and out.exists(), proc.stderr[-4000:]
    return json.loads(out.read_text())


# EPSP slack (late folding) and DynSGD (per-worker lanes) each had a lane bug that only kills
# showed (FINDINGS.md, bugs 2 and 3); both are here as their regressions.
@pytest.mark.parametrize("strategy", ["hps", "epspslack", "dynsgd"])
def test_three_worker_kills_in_one_fit_lose_and_double_no_task_or_round(chiefs, tmp_path,
                                                                         strategy):
    result = chaos_run(chiefs, "chaos", strategy, tmp_path)
    assert chaos_judge().check_chaos(result) == [], result
    c = result["counts"]
    assert result["kills"] == result["restarts"] == 3
    # Every task fit scheduled is in exactly one round and ended applied or dropped; the
    # updates the optimizer counted are the rounds the engine applied.
    assert c["fit_tasks"] == c["scheduled"] == result["epochs_run"] * 30
    assert c["in_two_rounds"] == 0 and not c["not_ended"]
    assert c["iterations"] == c["applied_rounds"] == c["version"] > 0


@pytest.mark.parametrize("strategy", CHAOS_STRATEGIES)
def test_killed_ps_then_backup_and_restore_resumes_the_saved_iterations(chiefs, tmp_path,
                                                                        strategy):
    ckpt = str(tmp_path / "backup")
    ps = chaos_run(chiefs, "ps", strategy, tmp_path, ckpt)
    resumed = chaos_run(chiefs, "resume", strategy, tmp_path, ckpt)
    assert chaos_judge().check_resume(ps, resumed) == [], (ps, resumed)
    assert ps["error_raised"]["type"] == "ParameterServerError"
    saved = ps["epoch_end_iterations"][-1]
    assert resumed["restored_iterations"] == resumed["checkpoint_iterations"] == saved > 0
    assert resumed["iterations"] == saved + resumed["new_updates"]
    assert resumed["new_updates"] > 0
