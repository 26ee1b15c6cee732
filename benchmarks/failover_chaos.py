"""PS kills under failover, across the round strategies and ASP (issue 51's chaos table): each run
is the scenario of tests/support/scenarios/failures.py ``failover`` (3 workers, 3 PS tasks
with PS 2 standing by, every worker reading the same batch, copies every 4 applied rounds)
in its own chief process on its own multi-process cluster. ``--kills``, the kinds of kill:
``1``: PS 1 killed after 6 applied rounds; ``2``: then PS 0, six rounds after that
failover; ``apply``: PS 1 killed on the apply thread as the 7th round's apply starts;
``worker``: worker 1 and PS 1 killed together after 6 applied rounds; ``move``: live
rebalancing on, ``scale_ps([0, 2])`` after 6 applied rounds, PS 1 killed as its first
variable move starts; ``epoch``: PS 1 killed as ``fit`` joins at the end of epoch 1 (the
engine idle: no step or apply meets the death); ``rejoin``: PS 1 killed, its process started
again, and once it rejoined (an epoch's end) PS 2 killed, whose variables must go to PS 1.

    .venv/bin/python benchmarks/failover_chaos.py OUT_DIR [--strategies bsp,hps] \\
        [--kills 1,2,apply,worker,move,epoch,rejoin] [--repeats 3] [--timeout 180] [--keras3]

Judged per run: the fit ended without an error; every kill was failed over (one event
each); ``optimizer.iterations`` = rounds applied - rounds rolled back (no update lost or
doubled beyond what the lines report); the weights against a local model after
``iterations`` SGD steps on the batch (``max_diff``: exact where a round is one step on the
batch, e.g. not under EPSP's late folding); a run that does not end within ``--timeout`` is
a hang. Writes ``OUT_DIR/failover_chaos.md`` and ``.json`` (after every run) and a log per
run. Every run takes benchmarks/chaos.py's heavy-job lock for itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = os.path.join(REPO, "tests", "support", "scenarios", "failures.py")
#: Every strategy set_failover accepts (the round strategies and ASP; ``asp:1``: ASP on
#: one worker, its steps one after another, so exact).
STRATEGIES = ("bsp", "backup", "epsp", "epspslack", "hps", "hpsoverlap", "hpspipe", "hpsint",
              "hpsfp", "grouped", "groupedsized", "casp", "caspsized", "ssp", "dynsgd", "asp",
              "asp:1")
#: Kinds of kill that need rounds: an apply on the chief, a live-rebalancing move.
ROUNDS_ONLY = ("apply", "move")
LOCK = "/tmp/tf-hetero-heavy.lock"  # benchmarks/chaos.py's
#: Kind of kill -> PS tasks killed (each one failover).
KILLS = {"1": 1, "2": 2, "apply": 1, "worker": 1, "move": 1, "epoch": 1, "rejoin": 2}


def run(strategy: str, kills: str, timeout: float, log: str, flavour: str = "tf_keras") -> dict:
    out = tempfile.mktemp(suffix=".json")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    cmd = ["flock", LOCK, "timeout", "-k", "10", str(timeout), sys.executable, SCENARIO,
           "failover", out, strategy, kills, flavour]
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    wall = time.monotonic() - t0
    if proc.returncode in (124, 137):
        return dict(verdict="hang", wall_s=wall)
    if proc.returncode != 0 or not os.path.exists(out):
        return dict(verdict=f"crash (exit {proc.returncode})", wall_s=wall)
    with open(out) as f:
        r = json.load(f)
    os.remove(out)
    r["wall_s"] = wall
    r["verdict"] = judge(r, kills)
    return r


def judge(r: dict, kind: str) -> str:
    kills = KILLS[kind]
    if r.get("error"):
        return f"error: {r['error']['type']}: {r['error']['message'][:120]}"
    events = r.get("events", [])
    if kind == "worker" and 1 in (r.get("live_workers") or ()):  # ASP: no engine to ask
        return "the killed worker still counted live"
    if len(r.get("killed", [])) != kills or len(events) != kills:
        return f"{len(r.get('killed', []))} kills, {len(events)} failovers"
    if kind == "rejoin" and (r.get("rejoined") != [1] or events[-1]["target"] != 1):
        return f"rejoined {r.get('rejoined')}, PS 2's variables went to PS {events[-1]['target']}"
    if r["iterations"] != r["applied"] - sum(e["rolled_back"] for e in events):
        return (f"iterations {r['iterations']} != applied {r['applied']} - rolled back "
                f"{sum(e['rolled_back'] for e in events)}")
    return "ok"


def table(rows: list[dict]) -> str:
    lines = ["| strategy | kills | runs | ok | hangs | exact (max diff <= 1e-5) | recovery s (median) "
             "| rounds rolled back per kill | steps run again per kill | verdicts not ok |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    keys = sorted({(r["strategy"], r["kills"]) for r in rows},
                  key=lambda k: (STRATEGIES.index(k[0]) if k[0] in STRATEGIES else 99,
                                 list(KILLS).index(k[1])))
    for s, k in keys:
        mine = [r for r in rows if (r["strategy"], r["kills"]) == (s, k)]
        ok = [r for r in mine if r["verdict"] == "ok"]
        events = [e for r in ok for e in r["events"]]
        exact = sum(r["max_diff"] <= 1e-5 * max(1.0, r["max_weight"]) for r in ok)
        rec = statistics.median(e["recover_s"] for e in events) if events else float("nan")
        back = statistics.mean(e["rolled_back"] for e in events) if events else float("nan")
        again = statistics.mean(e["remade"] for e in events) if events else float("nan")
        bad = "; ".join(sorted({r["verdict"] for r in mine if r["verdict"] != "ok"}))
        lines.append(f"| {s} | {k} | {len(mine)} | {len(ok)} | "
                     f"{sum(r['verdict'] == 'hang' for r in mine)} | {exact} of {len(ok)} | "
                     f"{rec:.2f} | {back:.1f} | {again:.1f} | {bad} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--kills", default="1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--keras3", action="store_true", help="the model in Keras 3")
    a = p.parse_args(argv)
    flavour = "keras3" if a.keras3 else "tf_keras"
    os.makedirs(a.out_dir, exist_ok=True)
    rows = []
    for rep in range(a.repeats):
        for strategy in a.strategies.split(","):
            for kills in a.kills.split(","):
                if strategy.startswith("asp") and kills in ROUNDS_ONLY:
                    continue  # ASP has neither (set_failover's docstring)
                if strategy == "asp:1" and kills == "worker":
                    continue  # its one worker killed: nothing runs the fit
                log = os.path.join(a.out_dir, f"{strategy.replace(':', '_')}-{kills}-{rep}.log")
                r = run(strategy, kills, a.timeout, log, flavour)
                r.update(strategy=strategy, kills=kills, repeat=rep, flavour=flavour)
                rows.append(r)
                print(f"{strategy} kills={kills} repeat={rep}: {r['verdict']} "
                      f"({r['wall_s']:.0f} s)", flush=True)
                save(os.path.join(a.out_dir, "failover_chaos"), rows, table(rows))
    print(table(rows))
    return 0


def save(stem: str, rows: list, text: str) -> None:
    """Writes ``stem.json`` (the rows) and ``stem.md`` (their table), after every run: an
    interrupted series keeps what it measured."""
    with open(stem + ".json", "w") as f:
        json.dump(rows, f)
    with open(stem + ".md", "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
