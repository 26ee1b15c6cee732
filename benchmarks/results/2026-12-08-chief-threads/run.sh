#!/bin/bash
# The chief's CPU by thread during each row of a bench run (from the repository's root):
#   flock /tmp/heavy.lock benchmarks/results/2026-12-08-chief-threads/run.sh OUT_DIR
# 25 s of each row's fit, 15 s after its "N tasks" line; py-spy (pip install py-spy) names the
# Python threads. Frozen at the commit of this folder's README.
set -u
OUT=$1; mkdir -p "$OUT"
HERE=$(dirname "$0")
.venv/bin/python -m tf_hetero bench --strategies hps --scenario one_slow --repeats 1 --round-profile \
    --out-dir "$OUT/bench" --json "$OUT/bench.json" > "$OUT/log.txt" 2>&1 &
BP=$!
for row in pss hps; do
  for i in $(seq 1 600); do grep -q "^\[tf-hetero bench\] $row: 1600 tasks" "$OUT/log.txt" && break; sleep 1; done
  sleep 15
  PATH="$PATH:/tmp/spyenv/bin" .venv/bin/python "$HERE/threads.py" $BP 25 > "$OUT/threads_$row.txt" 2>&1
done
wait $BP
