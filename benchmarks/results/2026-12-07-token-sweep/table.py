"""Prints the token-sweep tables from the sweep JSONs of this folder: python table.py . (frozen at 1287e49)."""
import json, os, sys
root = sys.argv[1]
def load(name):
    p = os.path.join(root, name + ".json")
    return json.load(open(p))["points"] if os.path.exists(p) else []
for rounds, sizes in ((100, (4, 64, 256, 1000)), (1000, (4, 64, 256))):
    for costs in ("uncontended", "calibration"):
        rows = {}
        for launch in ("closures", "tokens"):
            for p in load(f"{costs}_{launch}_r{rounds}"):
                key = (p["strategy"], p["launch"])
                rows.setdefault(key, {})[p["workers"]] = (p["efficiency"], p["steady_efficiency"])
        if not rows:
            continue
        print(f"\n{costs} costs, {rounds} BSP-sized rounds per point: efficiency (under way)\n")
        print("| row | launch | " + " | ".join(str(n) for n in sizes) + " |")
        print("|---|---|" + "---:|" * len(sizes))
        for (spec, launch), by in sorted(rows.items(), key=lambda kv: (kv[0][0] != "pss", kv[0][0], kv[0][1])):
            cells = [f"{by[n][0]:.2f} ({by[n][1]:.2f})" if n in by else "" for n in sizes]
            print(f"| {spec} | {launch} | " + " | ".join(cells) + " |")
