"""The CPU each thread of process PID spends over SECONDS (/proc/PID/task/*/stat), the
Python threads named by `py-spy dump`: python threads.py PID SECONDS. Frozen at the commit
of this folder's README."""
import os, re, shutil, subprocess, sys, time
pid = int(sys.argv[1]); dur = float(sys.argv[2])
def snap():
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            st = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        comm = st[st.index("(")+1:st.rindex(")")]
        f = st[st.rindex(")")+2:].split()
        out[int(tid)] = (comm, int(f[11]) + int(f[12]))
    return out
dump = subprocess.run([shutil.which("py-spy") or "py-spy", "dump", "-p", str(pid)], capture_output=True, text=True).stdout
names = {}
# py-spy dump: 'Thread 1234 (idle): "MainThread"'
for line in dump.splitlines():
    m = re.match(r"Thread (\d+) \(\w+\): \"([^\"]*)\"", line)
    if m: names[int(m.group(1))] = m.group(2)
a = snap(); t = time.time(); time.sleep(dur); b = snap(); el = time.time() - t
hz = os.sysconf("SC_CLK_TCK")
rows = []
for tid, (comm, ticks) in b.items():
    d = ticks - a.get(tid, (comm, 0))[1]
    rows.append((d / hz, tid, comm, names.get(tid, "")))
rows.sort(reverse=True)
tot = sum(r[0] for r in rows)
print(f"elapsed {el:.1f}s total CPU {tot:.2f}s")
agg = {}
for cpu, tid, comm, name in rows:
    key = name or comm
    key = re.sub(r"\d+", "#", key)
    agg[key] = agg.get(key, 0) + cpu
for k, v in sorted(agg.items(), key=lambda x: -x[1]): print(f"{v:7.2f}  {k}")
print("---")
for r in rows[:25]: print(f"{r[0]:7.2f} {r[1]} {r[2]} {r[3]}")
