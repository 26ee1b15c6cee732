# Summarizes probe_launch.py's tasks.json (gunzipped): per worker, mean launch rank and phase times.
import json, sys, collections, statistics as st
rounds = json.load(open(sys.argv[1]))
closer = collections.Counter(); order = collections.defaultdict(list)
per = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rounds:
    ts = sorted(r["tasks"], key=lambda t: t["call"])
    if not ts: continue
    last = max(r["tasks"], key=lambda t: t["end"])
    closer[last["w"]] += 1
    for rank, t in enumerate(ts):
        order[t["w"]].append(rank)
        for k in ("pick", "call", "first", "size", "budget"):
            per[t["w"]][k].append(t[k])
        per[t["w"]]["launch"].append(t["first"] - t["call"])
        per[t["w"]]["end"].append(t["end"])
print("closes:", dict(closer))
for w in sorted(per):
    d = per[w]
    print(w, "rank", round(st.mean(order[w]),2), " ".join(f"{k} {st.mean(v):.1f}" for k, v in d.items()))
