#!/bin/bash
# Measured runs for the simulator's validation on the current problem (issue 49, item 3).
set -e
cd "$(dirname "$0")/../.."
S=pss,asp,bsp,backup,ssp,epsp,epspslack,hps,hpsfp,hpsint,hpspipe,hpsoverlap,grouped,groupedsized,dynsgd,casp,caspsized,auto
C="--workers 4 --ps 2 --model cnn1d --dataset mnist1d --tasks 400 --steps-per-epoch 100 --batch-size 32 --target-accuracy 0.8"
for p in "one_slow:slow=3:4" "classes:classes=v100:2@1,p100:1@2,k80:1@4" "midrun:change=3@100:4"; do
  name=${p%%:*}; prof=${p#*:}
  .venv/bin/python -m tf_hetero bench --strategies $S $C --profile "$prof" --out-dir runs/validate5/$name --json runs/validate5/$name.json
done
