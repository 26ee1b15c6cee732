"""How closely emulated heterogeneity matches its profile, measured on the real cluster.

For each profile, runs ``tf-hetero demo`` (4 workers, 2 PS, separate processes, stock PSS) in
a fresh process and compares, per worker:

- the configured expected slowdown relative to the fastest worker, with the measured ratio of
  median task times (constant profiles), and
- the configured expected task time (``base_ms x E[factor]``), with the measured mean task
  time (this is what transient stragglers change).

Task times are measured on the coordinator, so they include the RPC round trip (~10 ms here)
on top of the emulated device time.

    make bench-emulation            # or: python benchmarks/emulation.py --steps 100
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

DEFAULT_PROFILES = ("slow=3:4", "classes=fast:2@1,mid:1@2,slow:1@3", "straggle=0.1x5")


def run_profile(profile: str, out_dir: str, epochs: int, steps: int) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    cmd = [sys.executable, "-m", "tf_hetero", "demo", "--profile", profile,
           "--epochs", str(epochs), "--steps-per-epoch", str(steps), "--out-dir", out_dir]
    subprocess.run(cmd, env=env, check=True, timeout=1800, stdout=subprocess.DEVNULL)
    with open(os.path.join(out_dir, "demo.json")) as f:
        return json.load(f)


def rows(profile: str, r: dict, base_ms: float) -> list[str]:
    fastest = min(r["slowdowns"])
    out = []
    for w, factor in enumerate(r["slowdowns"]):
        configured = factor / fastest
        measured = r["measured_ratio"][w]
        out.append(
            f"| {profile} | {w} | {r['tasks'][w]} | {configured:.2f} | {measured:.2f} | "
            f"{100 * (measured / configured - 1):+.1f}% | {base_ms * factor:.0f} | "
            f"{r['mean_ms'][w]:.1f} | {100 * (r['mean_ms'][w] / (base_ms * factor) - 1):+.1f}% |")
    return out


def main(argv=None) -> int:
    from tf_hetero.emulation.profile import Profile

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profiles", default=";;".join(DEFAULT_PROFILES),
                   help="profiles separated by ';;'")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--out-dir", default="runs/bench-emulation")
    args = p.parse_args(argv)
    lines = ["| profile | worker | tasks | configured ratio | measured median ratio | error | "
             "configured mean ms | measured mean ms | error |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    results = {}
    for i, profile in enumerate(args.profiles.split(";;")):
        print(f"running profile {profile!r} ...", flush=True)
        r = run_profile(profile, os.path.join(args.out_dir, f"profile{i}"), args.epochs,
                        args.steps)
        results[profile] = r
        lines += rows(profile, r, Profile.parse(profile).base_ms)
    table = "\n".join(lines)
    print("\n" + table)
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "emulation.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out_dir, "emulation.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
