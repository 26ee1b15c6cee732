"""`tf-hetero launch` and `tf-hetero run` with real server processes.

Each `run` test starts a 2-worker/1-PS cluster of separate processes through the real launcher,
so these take ~10-20 s each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from support import REPO, alive, cli, server_pids, wait_until

pytestmark = pytest.mark.cluster

# A stand-in training program: records what the launcher gave it, checks every server
# listens, then exits with the code in argv[2] or, given "wait", blocks until signalled.
PROGRAM = textwrap.dedent("""
    import json, os, socket, sys, time
    out, mode = sys.argv[1], sys.argv[2]
    cfg = json.loads(os.environ["TF_CONFIG"])
    listening = []
    for job, addrs in cfg["cluster"].items():
        if job == "chief":
            continue
        for a in addrs:
            host, port = a.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5):
                listening.append(a)
    with open(out + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "tf_config": cfg, "listening": listening,
                   "profile": os.environ.get("TF_HETERO_PROFILE")}, f)
    os.replace(out + ".tmp", out)
    if mode == "wait":
        time.sleep(600)
    sys.exit(int(mode))
""")


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return str(path)


def _run_args(tmp_path, program, mode, *extra):
    return ["run", "--workers", "2", "--ps", "1", "--log-dir", str(tmp_path / "logs"), *extra,
            "--", sys.executable, program, str(tmp_path / "report.json"), mode]


def _assert_all_gone(pids):
    assert pids, "no server PIDs found in the logs"
    assert wait_until(lambda: not any(alive(p) for p in pids), timeout=15), \
        f"processes left behind: {[p for p in pids if alive(p)]}"


def test_run_gives_program_chief_tf_config_and_profile_then_stops_everything(
        tmp_path, program, quiet_env):
    proc = cli(*_run_args(tmp_path, program, "0", "--profile", "slow=1:3"), env=quiet_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["tf_config"]["task"] == {"type": "chief", "index": 0}
    assert len(report["tf_config"]["cluster"]["worker"]) == 2
    assert len(report["tf_config"]["cluster"]["ps"]) == 1
    assert all(a.startswith("127.0.0.1:") for addrs in report["tf_config"]["cluster"].values()
               for a in addrs)
    assert len(report["listening"]) == 3
    assert "slow=1:3" in report["profile"]
    pids = server_pids(str(tmp_path / "logs"))
    assert len(pids) == 3
    everything = server_pids(str(tmp_path / "logs"), forkserver=True)  # and the fork server
    assert len(everything) == 4 and set(pids) < set(everything)
    _assert_all_gone(everything + [report["pid"]])


def test_run_returns_program_failure_code_and_stops_everything(tmp_path, program, quiet_env):
    proc = cli(*_run_args(tmp_path, program, "3"), env=quiet_env)
    assert proc.returncode == 3, proc.stderr[-2000:]
    _assert_all_gone(server_pids(str(tmp_path / "logs"), forkserver=True))


def test_run_on_sigint_stops_program_and_cluster(tmp_path, program, quiet_env):
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tf_hetero", *_run_args(tmp_path, program, "wait")],
        env=quiet_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_until(lambda: (tmp_path / "report.json").exists(), timeout=180), \
            "the program never started"
        report = json.loads((tmp_path / "report.json").read_text())
        launcher.send_signal(signal.SIGINT)
        out, _ = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 130, out[-2000:]
    assert "cluster stopped" in out
    _assert_all_gone(server_pids(str(tmp_path / "logs"), forkserver=True) + [report["pid"]])


def test_killed_launcher_leaves_no_process_behind(tmp_path, program, quiet_env):
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tf_hetero", *_run_args(tmp_path, program, "wait")],
        env=quiet_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: (tmp_path / "report.json").exists(), timeout=180)
        report = json.loads((tmp_path / "report.json").read_text())
        launcher.kill()  # SIGKILL: no chance to clean up; PR_SET_PDEATHSIG must do it
        launcher.wait(timeout=30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    _assert_all_gone(server_pids(str(tmp_path / "logs"), forkserver=True) + [report["pid"]])


def test_run_without_program_is_a_usage_error(quiet_env):
    proc = cli("run", "--workers", "2", "--ps", "1", env=quiet_env, timeout=60)
    assert proc.returncode == 2
    assert "no training program given" in proc.stderr


def test_run_rejects_profile_that_does_not_fit_the_cluster(quiet_env):
    proc = cli("run", "--workers", "2", "--ps", "1", "--profile", "slow=5:4", "--", "true",
               env=quiet_env, timeout=60)
    assert proc.returncode == 2
    assert "worker 5" in proc.stderr and "0-1" in proc.stderr


# ----------------------------------------------------------------------------- launch
def _tf_config(role, index, cluster=None):
    cluster = cluster or {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"],
                          "ps": ["127.0.0.1:3"]}
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})


@pytest.mark.parametrize("tf_config, field", [
    ('{"cluster": ', "not valid JSON"),
    (_tf_config("worker", 5), r'TF_CONFIG["task"]["index"] is 5'),
    (json.dumps({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
                 "task": {"type": "worker", "index": 0}}), 'no "ps" job'),
])
def test_launch_rejects_bad_tf_config_with_one_line_error(quiet_env, tf_config, field):
    quiet_env["TF_CONFIG"] = tf_config
    proc = cli("launch", env=quiet_env, timeout=60)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1, proc.stderr
    assert field in err[0] and "Fix:" in err[0]


def test_launch_evaluator_is_accepted_and_reported_unused(quiet_env):
    quiet_env["TF_CONFIG"] = json.dumps({
        "cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]},
        "task": {"type": "evaluator", "index": 0}})
    proc = cli("launch", env=quiet_env, timeout=60)
    assert proc.returncode == 0
    assert "not used for training" in proc.stdout


def test_launch_chief_without_program_is_a_usage_error(quiet_env):
    quiet_env["TF_CONFIG"] = _tf_config("chief", 0)
    proc = cli("launch", env=quiet_env, timeout=60)
    assert proc.returncode == 2
    assert "tf-hetero launch -- python train.py" in proc.stderr


def test_launch_worker_serves_until_sigterm_then_exits_cleanly(quiet_env):
    from tf_hetero.cluster.local import pick_ports

    ports = pick_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"],
               "ps": [f"127.0.0.1:{ports[2]}"]}
    quiet_env["TF_CONFIG"] = _tf_config("worker", 0, cluster)
    proc = subprocess.Popen([sys.executable, "-m", "tf_hetero", "launch"], env=quiet_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        from tf_hetero.cluster.local import listening

        assert wait_until(lambda: listening("127.0.0.1", ports[1]) or proc.poll() is not None,
                          timeout=120)
        assert proc.poll() is None, proc.stdout.read()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-2000:]
    assert "worker 0 serving on" in out and "worker 0 stopping" in out


def test_a_launched_server_imports_tensorflow_without_keras(quiet_env):
    """What ``tf-hetero launch`` does before a worker or ps imports TensorFlow: Keras stays
    out, and TensorFlow still imports and runs (a TensorFlow upgrade that needs Keras at
    import fails here)."""
    code = ("import sys; from tf_hetero.cluster import roles; roles.without_keras(); "
            "import tensorflow as tf; assert int(tf.constant(2) + 1) == 3; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'keras' "
            "and sys.modules[m] is not None))")
    out = subprocess.run([sys.executable, "-c", code], env=quiet_env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_example_trains_through_tf_config_launch(tmp_path, quiet_env):
    """The single-binary example trains with model.fit on a real multi-process cluster."""
    proc = cli("run", "--workers", "2", "--ps", "1", "--profile", "slow=1:2;base_ms=50",
               "--log-dir", str(tmp_path / "logs"), "--", sys.executable,
               os.path.join(REPO, "examples", "train.py"), "--epochs", "1", "--steps", "30",
               env=quiet_env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "epoch 1/1 done" in proc.stdout
    tasks = json.loads(proc.stdout.split("tasks per worker:")[1].splitlines()[0])
    assert sum(tasks) == 30 and tasks[0] > tasks[1]  # worker 1 is 2x slower
    _assert_all_gone(server_pids(str(tmp_path / "logs"), forkserver=True))
