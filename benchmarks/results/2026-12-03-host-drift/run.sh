#!/bin/bash
cd /work/main
for k in 1 2; do
  .venv/bin/python benchmarks/results/2026-12-03-host-drift/hostprobe.py
  .venv/bin/python -m tf_hetero bench --strategies pss,hps --workers 4 --ps 2 --model cnn1d --dataset mnist1d --tasks 800 --steps-per-epoch 200 --target-accuracy 0.8 --profile "slow=3:4" --round-profile --out-dir runs/host-drift/r$k --json runs/host-drift/r$k/b.json > runs/host-drift/r$k.log 2>&1
  .venv/bin/python benchmarks/results/2026-12-03-host-drift/hostprobe.py
done
