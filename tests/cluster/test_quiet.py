"""TensorFlow's C++ log lines stay out of tf-hetero's output unless asked for (--tf-logs,
TF_HETERO_TF_LOGS=1); errors still show. Every process here runs with neither
TF_CPP_MIN_LOG_LEVEL nor TF_HETERO_TF_LOGS set, as on a user's machine."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tf_hetero import tflogs
from tf_hetero.cluster.local import pick_ports
from tf_hetero.cluster.tf_config import make_tf_config

from support import REPO, cli

#: Bound on a server process reaching "serving on" (a cold TensorFlow import is ~5 s here).
SERVE_TIMEOUT_S = 120

LINES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795441465.822551   19240 port.cc:153] oneDNN custom operations are on.\n",
    "E0000 00:00:1795441468.480765   19240 cuda_platform.cc:52] failed call to cuInit: (303)\n",
    "[tf-hetero] epoch 1/2 done in 3.1s  loss 0.9\n",
    "E0000 00:00:1795441468.480765   19240 grpc_server.cc:1] Connection refused\n",
    "Traceback (most recent call last):\n",
]


def user_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_HETERO_TF_LOGS", "TF_CONFIG")}
    env.update(extra)
    return env


def test_relay_drops_info_and_cuda_probe_lines_and_keeps_errors_and_ours():
    out = io.StringIO()
    tflogs.relay(io.BytesIO("".join(LINES).encode()), out).join(timeout=10)
    assert out.getvalue().splitlines() == [LINES[3].rstrip(), LINES[4].rstrip(),
                                           LINES[5].rstrip()]


def test_child_processes_get_the_quiet_level_unless_logs_are_wanted():
    assert tflogs.child_env({})["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert "TF_CPP_MIN_LOG_LEVEL" not in tflogs.child_env({"TF_HETERO_TF_LOGS": "1"})
    assert tflogs.child_env({"TF_CPP_MIN_LOG_LEVEL": "0"})["TF_CPP_MIN_LOG_LEVEL"] == "0"


def serve_once(*flags: str) -> str:
    """Starts `tf-hetero [flags] launch` as a worker, waits until it serves, stops it and
    returns everything it printed."""
    ports = pick_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"],
               "ps": [f"127.0.0.1:{ports[2]}"]}
    env = user_env(TF_CONFIG=make_tf_config(cluster, "worker", 0))
    proc = subprocess.Popen([sys.executable, "-m", "tf_hetero", *flags, "launch"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines, deadline = [], time.monotonic() + SERVE_TIMEOUT_S
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "serving on" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    text = "".join(lines) + rest
    assert "serving on" in text, text[-2000:]
    return text


@pytest.mark.cluster
def test_a_server_process_prints_no_tensorflow_log_lines():
    text = serve_once()
    assert not [line for line in text.splitlines() if tflogs.TF_LOG_LINE.search(line)], text


@pytest.mark.cluster
def test_tf_logs_flag_shows_tensorflow_log_lines_again():
    text = serve_once("--tf-logs")
    assert any(tflogs.TF_LOG_LINE.search(line) for line in text.splitlines()), text


@pytest.mark.cluster
def test_run_keeps_tensorflow_log_lines_out_even_when_the_program_imports_it_first(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent("""
        import json, sys
        import tensorflow as tf  # before tf_hetero: only the launcher can filter its logs
        print(json.dumps({"sum": int(tf.constant(1) + 1)}), flush=True)
        print("a line of the program on stderr", file=sys.stderr, flush=True)
    """))
    proc = cli("run", "--workers", "1", "--ps", "1", "--", sys.executable, str(program),
               env=user_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '{"sum": 2}' in proc.stdout
    assert "a line of the program on stderr" in proc.stderr  # its own output still shows
    noise = [line for line in (proc.stdout + proc.stderr).splitlines()
             if tflogs.TF_LOG_LINE.search(line)]
    assert not noise, noise[:5]


def readme_example() -> str:
    """The README's first Python example (the one a new user runs first), as written there."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.cluster
def test_the_readme_example_ends_without_a_tensorflow_error_line(tmp_path):
    # Its LocalCluster stops the servers at the end of the `with` block; the program's
    # tf.functions are freed after that. Without LocalCluster.stop() detaching this process
    # first, every free logs "Failed to remove function remotely ... Connection refused"
    # (~130 E-lines, after "done").
    program = tmp_path / "example.py"
    program.write_text(readme_example() + '\nprint("example done", flush=True)\n')
    proc = subprocess.run([sys.executable, str(program)], env=user_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "example done" in proc.stdout
    noise = [line for line in out.splitlines() if tflogs.TF_LOG_LINE.search(line)]
    assert not noise, noise[:5]
