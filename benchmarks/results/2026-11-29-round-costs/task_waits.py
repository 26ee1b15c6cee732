# Frozen at commit ed64128: run with `git checkout ed64128`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
import gzip, json, sys, statistics as st, collections
d=json.load((gzip.open if sys.argv[1].endswith('.gz') else open)(sys.argv[1], 'rt'))
for r in d['runs']:
    if r['strategy'] in ('pss',): continue
    by=collections.defaultdict(list)
    for w,s,e,a in r['timeline']: by[w].append((s,e))
    n=min(len(v) for v in by.values())
    ws=sorted(by)
    dur={w:[] for w in ws}; bar={w:[] for w in ws}; st_off={w:[] for w in ws}
    for k in range(5,n):
        tasks={w:sorted(by[w])[k] for w in ws}
        end=max(e for s,e in tasks.values()); start=min(s for s,e in tasks.values())
        for w,(s,e) in tasks.items():
            dur[w].append(e-s); bar[w].append(end-e); st_off[w].append(s-start)
    print(r['strategy'], r['repeat'], ' '.join(f"w{w}: dur {1e3*st.mean(dur[w]):.0f} startoff {1e3*st.mean(st_off[w]):.0f} barrier {1e3*st.mean(bar[w]):.0f}" for w in ws))
