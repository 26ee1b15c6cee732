#!/bin/bash
# Frozen at 085a741 plus a temporary switch (AB_OWN) in strategies/runtime/applier.py: 1 = the code of 5dd163a, 0 = 085a741.
# A/B: the chief's apply thread on its own executor (B, AB_OWN=1) or the default one (A, AB_OWN=0), alternated.
cd /work/main
for r in 0 1 2; do
  for v in 0 1; do
    rm -rf /tmp/tf_hetero_cluster_*
    AB_OWN=$v .venv/bin/tf-hetero bench --strategies hpsoverlap,ssp,hps --profile "slow=3:4" --model cnn1d \
      --dataset mnist1d --workers 4 --ps 2 --tasks 400 --steps-per-epoch 100 --repeats 1 \
      --out-dir /tmp/an/ab/own${v}_r$r > /tmp/an/ab/own${v}_r$r.log 2>&1
    echo "own=$v r=$r rc=$?" >> /tmp/an/ab/progress.txt
  done
done
