#!/bin/bash
# The flat call's A/B on the round (README, section 3). TFH_NOFLAT switched the flat call off
# through a temporary check in strategies/runtime/closures.py (ClosureCache.keep), not
# committed; frozen at the commit of this folder's README.
cd /work/main
for rep in 0 1 2; do
  for off in 1 ""; do
    tag=$([ -n "$off" ] && echo stock || echo flat)
    TFH_NOFLAT=$off .venv/bin/tf-hetero bench --strategies hps --profile "base_ms=100;slow=3:4" --model cnn1d --dataset mnist1d --workers 4 --ps 2 --tasks 800 --steps-per-epoch 200 --target-accuracy 0.8 --round-profile --out-dir /tmp/an/abr/$tag$rep > /tmp/an/abr_$tag$rep.log 2>&1
  done
done
echo done > /tmp/an/abr_done
