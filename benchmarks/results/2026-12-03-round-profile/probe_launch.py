# Frozen at the commit that adds this folder (run on its working tree): it imports tf-hetero
# internals that may move. Results and command: README.md beside it.
"""Diagnostic: per-task launch data of H-PS rounds (who is picked up when, who closes)."""
import json, sys, collections, statistics
from tf_hetero.telemetry import roundprofile
from tf_hetero.tools import cli

orig = roundprofile.round_profile
def patched(rounds, stamps, offset, applies=(), skip=0):
    per = roundprofile.match_stamps(stamps, offset)
    out = []
    for r in rounds[5:]:
        if str(r.kind) != "train" or r.applied <= 0: continue
        done = [t for t in r.tasks if str(t.state) == "done" and not t.drain and t.t_end <= r.t_close]
        rows = []
        for t in done:
            s = per[t.worker].within(t.t_start, t.t_end)
            if s is None: continue
            rows.append(dict(w=t.worker, size=t.size, pick=1e3*(t.t_start-r.t_open), call=1e3*(t.t_call-r.t_open),
                             first=1e3*(s[0]-r.t_open), dev_end=1e3*(s[1]-r.t_open), budget=1e3*s[2], end=1e3*(t.t_end-r.t_open)))
        out.append(dict(close=1e3*(r.t_close-r.t_open), tasks=rows))
    json.dump(out, open(sys.argv[-1] + ".tasks.json", "w"))
    return orig(rounds, per, offset, applies, skip)
roundprofile.round_profile = patched
sys.exit(cli.main(sys.argv[1:-1]))
