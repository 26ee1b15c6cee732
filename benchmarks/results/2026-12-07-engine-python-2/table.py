# Frozen at 75bcbe9.
"""Markdown tables from table_raw.txt (run_table.sh): us of simulated time per task, before -> after."""
import re, sys, collections
cells = collections.defaultdict(dict)
for line in open(sys.argv[1] if len(sys.argv) > 1 else "table_raw.txt"):
    parts = line.rstrip("\n").split("|")
    if len(parts) != 3:
        continue
    tree, prof, rest = parts
    m = re.match(r"(\S+)\s+N=(\d+)\s+(?:[\d.]+ s\s+([\d.]+) us/task|(.*))", rest)
    if not m:
        continue
    name, n = m.group(1), int(m.group(2))
    us = m.group(3)
    cells[(prof, name, n)][tree] = (f"{float(us):.0f}" if us else ("not run" if "not run" in rest else "timeout"))
for prof in dict.fromkeys(p for p, _, _ in cells):
    ns = sorted({n for p, _, n in cells if p == prof})
    print(f"\n{prof}: simulated us per task, before -> after\n")
    print("| strategy | " + " | ".join(f"{n} workers" for n in ns) + " |")
    print("|---|" + "---:|" * len(ns))
    for name in dict.fromkeys(s for p, s, _ in cells if p == prof):
        row = []
        for n in ns:
            c = cells.get((prof, name, n), {})
            row.append(f"{c.get('before', '')} -> {c.get('after', '')}")
        print(f"| {name} | " + " | ".join(row) + " |")
