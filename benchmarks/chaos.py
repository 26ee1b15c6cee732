"""Chaos matrix: every (strategy x scenario) cell, each run in its own chief processes on its
own multi-process LocalCluster (tests/support/scenarios/chaos.py), judged by the same checks as
tests/cluster/test_failures.py. Writes benchmarks/results/chaos/chaos.md and chaos.json (rewritten
after every cell, so a partial matrix survives an interruption) and one log per run.

    .venv/bin/python benchmarks/chaos.py [--strategies bsp,hps] [--runs 1] [--timeout 150]

Scenarios: ``chaos`` (3 worker kills + restarts in one fit: the fit completes; every task
scheduled ends applied or dropped, in exactly one round; iterations == the engine's applied
updates) and ``ps-resume`` (the PS killed in epoch 2: a clear ParameterServerError; a new
cluster resumes with BackupAndRestore: the restored iterations equal those saved, and the
fit ends at restored + its new updates).

Every process that starts TensorFlow takes /tmp/tf-hetero-heavy.lock for its own run
only (``flock``), so other heavy jobs interleave between runs; ``timeout`` bounds the run,
not the wait for the lock. A run that hangs dumps every thread's stack (faulthandler) into
its log before it is killed; the table quotes the stack's top frames.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = os.path.join(REPO, "tests", "support", "scenarios", "chaos.py")
OUT_DIR = os.path.join(REPO, "benchmarks", "results", "chaos")
LOCK = "/tmp/tf-hetero-heavy.lock"
STRATEGIES = ("bsp", "backup", "ssp", "epsp", "epspslack", "hps", "hpspipe", "hpsint",
              "grouped", "dynsgd", "casp")
SCENARIO_NAMES = ("chaos", "ps-resume")
#: Bound on one scenario process once it holds the lock (a healthy run is 30-60 s here).
DEFAULT_TIMEOUT_S = 150
#: Bound on waiting for the lock (other engineers' heavy jobs).
LOCK_WAIT_S = 3600
#: Take the lock per scenario process (default). ``--lock none`` when the whole runner runs
#: under ``flock LOCK`` already (a nested flock on the same file would wait forever).
PER_RUN_LOCK = True

sys.path.insert(0, os.path.dirname(SCENARIOS))
import chaos as judge  # noqa: E402  (tests/support/scenarios/chaos.py: pure checks, no TensorFlow)


def run_process(args: list[str], log_path: str, timeout_s: float, env_extra=None) -> dict:
    """One scenario process under the lock; returns its JSON result, or what went wrong."""
    out = args[2]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CHAOS_DUMP_AFTER_S=str(timeout_s - 15),
               **(env_extra or {}))
    env.pop("TF_CONFIG", None)
    lock = ["flock", "-w", str(LOCK_WAIT_S), LOCK] if PER_RUN_LOCK else []
    cmd = [*lock, "timeout", "-k", "10", str(timeout_s), sys.executable, SCENARIOS, *args]
    t0 = time.monotonic()
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=LOCK_WAIT_S + timeout_s + 60, cwd=REPO)
    wall = time.monotonic() - t0
    if proc.returncode == 0 and os.path.exists(out):
        with open(out) as f:
            result = json.load(f)
        result["_wall_s"] = round(wall, 1)
        result["_run_s"] = round(time.time() - result.get("_started_at", time.time() - wall), 1)
        return result
    with open(log_path) as f:
        text = f.read()
    reason = (f"hung: killed after {timeout_s} s" if proc.returncode in (124, 137)
              else f"process exited {proc.returncode} without a result")
    return dict(error=dict(type="Hang" if "hung" in reason else "Crash", message=reason,
                           stack=stack_summary(text)), _wall_s=round(wall, 1),
                _run_s=timeout_s if "hung" in reason else None)


def stack_summary(text: str) -> str:
    """The faulthandler dump's interesting frames: each thread's top frame outside
    threading.py/queue.py, and the main thread's innermost library frame."""
    if "Timeout (" not in text:
        return "\n".join(text.strip().splitlines()[-8:])
    dump = text[text.rindex("Timeout ("):]
    threads = re.split(r"\n(?=Thread 0x)", dump)[1:]
    lines = []
    for th in threads:
        frames = [ln.strip() for ln in th.splitlines()[1:] if ln.strip().startswith("File")]
        frames = [f for f in frames if "threading.py" not in f and "/queue.py" not in f]
        if frames:
            top = re.sub(r'File ".*?/(site-packages/|work/main/)?', "", frames[0])
            lines.append(top)
    return "; ".join(dict.fromkeys(lines))


def chaos_cell(strategy, tmp, log_path, timeout_s, env_extra):
    out = os.path.join(tmp, "chaos.json")
    r = run_process(["chaos", strategy, out], log_path, timeout_s, env_extra)
    if r.get("error", {}).get("type") in ("Hang", "Crash"):
        problems = [f"{r['error']['message']}: {r['error']['stack']}"]
    else:
        problems = judge.check_chaos(r)
    if r.get("error") and r["error"].get("traceback"):
        problems.append("traceback: " + r["error"]["traceback"].strip().splitlines()[-1][:300])
    c = r.get("counts", {})
    detail = dict(kills=r.get("kills"), rejoined=r.get("rejoined"), live_end=r.get("live_end"),
                  epochs=r.get("epochs_run"), scheduled=c.get("scheduled"),
                  iterations=c.get("iterations"), engine_updates=c.get("version"),
                  states=c.get("states"), fit_s=r.get("fit_s"), wall_s=r.get("_wall_s"), run_s=r.get("_run_s"),
                  chaos_log=r.get("chaos_log"))
    if problems and c:  # the full counts of a failed run (folded tasks, mismatched rounds)
        detail["counts"] = c
    return problems, detail


def ps_resume_cell(strategy, tmp, log_path, timeout_s, env_extra):
    ckpt = os.path.join(tmp, "backup")
    ps = run_process(["ps", strategy, os.path.join(tmp, "ps.json"), ckpt], log_path,
                     timeout_s, env_extra)
    if ps.get("error", {}).get("type") in ("Hang", "Crash"):
        return ([f"PS run {ps['error']['message']}: {ps['error']['stack']}"],
                dict(wall_s=ps.get("_wall_s"), run_s=ps.get("_run_s")))
    resumed = run_process(["resume", strategy, os.path.join(tmp, "resume.json"), ckpt],
                          log_path, timeout_s, env_extra)
    if resumed.get("error", {}).get("type") in ("Hang", "Crash"):
        problems = [f"resume run {resumed['error']['message']}: {resumed['error']['stack']}"]
    else:
        problems = judge.check_resume(ps, resumed)
        if resumed.get("error", {}).get("traceback"):
            problems.append("traceback: "
                            + resumed["error"]["traceback"].strip().splitlines()[-1][:300])
    detail = dict(ps_error=(ps.get("error_raised") or {}).get("type"),
                  killed=ps.get("killed"), saved_epoch_ends=ps.get("epoch_end_iterations"),
                  checkpoint_iterations=resumed.get("checkpoint_iterations"),
                  restored=resumed.get("restored_iterations"),
                  new_updates=resumed.get("new_updates"), final=resumed.get("iterations"),
                  epochs_resumed=resumed.get("epochs_run"),
                  wall_s=round((ps.get("_wall_s") or 0) + (resumed.get("_wall_s") or 0), 1),
                  run_s=round((ps.get("_run_s") or 0) + (resumed.get("_run_s") or 0), 1))
    return problems, detail


CELLS = {"chaos": chaos_cell, "ps-resume": ps_resume_cell}


def write(results: dict, meta: dict) -> None:
    os.makedirs(OUT_DIR, exist_ok=True)
    stem = "chaos" + (f"-{meta['tag']}" if meta.get("tag") else "")
    with open(os.path.join(OUT_DIR, stem + ".json"), "w") as f:
        json.dump(dict(meta=meta, cells=results), f, indent=1, default=str)
    lines = [
        "# Chaos matrix", "",
        f"Generated by `benchmarks/chaos.py` ({meta['started']} UTC; {meta['runs']} run(s) per "
        f"cell; {meta['workers']} workers, 1 PS, separate processes; kill order "
        f"{meta['kill_order']}). `chaos`: 3 worker kills + restarts in one fit; "
        "`ps-resume`: PS killed in epoch 2, then BackupAndRestore resume on a new cluster.",
        f"Wall time so far: {meta.get('wall_s', 0):.0f} s.", "",
        "| strategy | chaos runs | chaos passes | ps-resume runs | ps-resume passes | failure reasons |",
        "|---|---|---|---|---|---|"]
    for s, cells in results.items():
        row, reasons = [s], []
        for sc in SCENARIO_NAMES:
            runs = cells.get(sc, [])
            row += [str(len(runs)), str(sum(not r["problems"] for r in runs))]
            for i, r in enumerate(runs):
                for p in r["problems"]:
                    reasons.append(f"{sc} run {i + 1}: {p}")
        lines.append("| " + " | ".join(row) + " | "
                     + ("<br>".join(x.replace("|", "/").replace("\n", " ") for x in reasons)
                        or "") + " |")
    lines += ["", "## Details per run", ""]
    for s, cells in results.items():
        for sc in SCENARIO_NAMES:
            for i, r in enumerate(cells.get(sc, [])):
                d = {k: v for k, v in r["detail"].items() if k != "chaos_log"}
                lines.append(f"- {s} / {sc} run {i + 1}: {'PASS' if not r['problems'] else 'FAIL'}"
                             f" {json.dumps(d, default=str)} (log: `{r['log']}`)")
    with open(os.path.join(OUT_DIR, stem + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--scenarios", default=",".join(SCENARIO_NAMES))
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="bound on one scenario process, seconds")
    p.add_argument("--kill-order", default=None, help="workers killed in turn, e.g. 1,2,0")
    p.add_argument("--tag", default="", help="write chaos-TAG.md/.json (a variant matrix)")
    p.add_argument("--merge", action="store_true",
                   help="add to the existing chaos.json instead of starting a new table")
    p.add_argument("--lock", choices=("run", "none"), default="run",
                   help="run: flock each scenario process (default); none: the caller holds it")
    a = p.parse_args(argv)
    global PER_RUN_LOCK
    PER_RUN_LOCK = a.lock == "run"
    env_extra = {"CHAOS_KILL_ORDER": a.kill_order} if a.kill_order else {}
    os.makedirs(os.path.join(OUT_DIR, "logs"), exist_ok=True)
    results, meta = {}, dict(started=datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
                             runs=a.runs, workers=judge.WORKERS,
                             kill_order=a.kill_order or ",".join(map(str, judge.KILL_ORDER)),
                             timeout_s=a.timeout, wall_s=0.0, tag=a.tag)
    stem = os.path.join(OUT_DIR, "chaos" + (f"-{a.tag}" if a.tag else ""))
    if a.merge and os.path.exists(stem + ".json"):
        with open(stem + ".json") as f:
            old = json.load(f)
        results, meta = old["cells"], dict(old["meta"], wall_s=old["meta"].get("wall_s", 0))
    t0, base = time.monotonic(), meta["wall_s"]
    for s in a.strategies.split(","):
        for sc in a.scenarios.split(","):
            for i in range(a.runs):
                tmp = tempfile.mkdtemp(prefix=f"chaos-{s}-{sc}-")
                log = os.path.join(OUT_DIR, "logs", f"{a.tag + '-' if a.tag else ''}{s}-{sc}-{len(results.get(s, {}).get(sc, [])) + 1}.log")
                if os.path.exists(log):
                    os.remove(log)
                c0 = time.monotonic()
                try:
                    problems, detail = CELLS[sc](s, tmp, log, a.timeout, env_extra)
                except Exception as e:  # noqa: BLE001 - a broken cell is a row, not a crash
                    problems, detail = [f"runner: {type(e).__name__}: {e}"], {}
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                detail["cell_s"] = round(time.monotonic() - c0, 1)
                results.setdefault(s, {}).setdefault(sc, []).append(
                    dict(problems=problems, detail=detail, log=os.path.relpath(log, REPO)))
                meta["wall_s"] = base + time.monotonic() - t0
                write(results, meta)
                print(f"{s:10s} {sc:9s} run {i + 1}: {'PASS' if not problems else 'FAIL'} "
                      f"({detail['cell_s']} s) {'; '.join(problems)[:400]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
