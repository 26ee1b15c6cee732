"""CPU of a test-suite run by process (run 4 of this folder's README; frozen at `470c6b6`).

    python3 cpu_by_process.py PACCT PYLOG

PACCT: BSD process accounting of the run (Debian's `acct`: `accton PACCT` before, `accton
off` after; `dump-acct` reads it; CPU in 1/100 s). PYLOG: one line per Python process
started during the run, written by a `.pth` hook in the venv's site-packages (removed
after the run):

    import os, sys, time  # _acctlog.py, imported by zz_acctlog.pth
    fd = os.open("/tmp/an/pylog.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, ("%.3f\t%d\t%d\t%s\t%s\t%s\n" % (time.time(), os.getpid(), os.getppid(),
        os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_CURRENT_TEST", ""),
        " ".join(sys.argv[:4]))).encode())

A process is charged to the test whose ``PYTEST_CURRENT_TEST`` its nearest logged Python
ancestor inherited; forked servers (no exec) to their fork server's test.
"""
import subprocess, collections, sys
acct, pylog = sys.argv[1], sys.argv[2]
recs = {}
for line in subprocess.run(["dump-acct", acct], capture_output=True, text=True).stdout.splitlines():
    f = [x.strip() for x in line.split("|")]
    recs[int(f[9])] = dict(comm=f[0], cpu=(float(f[2]) + float(f[3])) / 100, ppid=int(f[10]), flags=f[11])
py = {}
for line in open(pylog):
    t, pid, ppid, xw, cur, argv = (line.rstrip("\n").split("\t") + [""] * 6)[:6]
    py[int(pid)] = dict(ppid=int(ppid), test=cur.split(" ")[0], argv=argv)
master = [p for p, v in py.items() if v["argv"].startswith("-m -n")][0]
workers = [p for p, v in py.items() if v["ppid"] == master]
def chain(pid):
    out = []
    while pid in recs or pid in py:
        out.append(pid)
        pid = (py.get(pid) or recs[pid])["ppid"]
        if len(out) > 30: break
    return out
cat = collections.Counter(); n = collections.Counter()
for pid, r in recs.items():
    c = chain(pid)
    if pid == master: k = "pytest master"
    elif pid in workers: k = "xdist workers (in-process tests, pure tests)"
    elif not any(p in workers for p in c): k = "outside the suite"
    else:
        tp = next((p for p in c if p in py and py[p]["test"]), None)
        mod = py[tp]["test"].split("::")[0].replace("tests/", "") if tp else "?"
        if pid in py:
            a = py[pid]["argv"]
            role = "python -m (fork server or CLI module)" if a == "-m" else "python " + a.split(" ")[0][:30]
        elif "F" in r["flags"]:
            role = "forked server"
        else:
            role = r["comm"]
        k = f"{mod}: {role}"
    cat[k] += r["cpu"]; n[k] += 1
tot = sum(cat.values())
print(f"total CPU {tot:.0f} core-s in {len(recs)} processes")
for k, v in cat.most_common(40):
    if v >= 1: print(f"{v:7.1f} {100*v/tot:5.1f}% {n[k]:4d}  {k}")
