#!/bin/bash
# Frozen at 75bcbe9: every registered strategy, before (49f2b27) and after, 64/256/1000 workers, two profiles.
# Per-task simulated time (the engine's and policies' Python plus the simulator's own loop), every registered strategy,
# before (49f2b27) and after (HEAD), 10 rounds' worth of tasks, a quarter of the workers 4x slower and transient stragglers.
cd /tmp/an/s80
for prof in "" "straggle=0.1x5"; do
for N in 64 256 1000; do
for s in asp auto backup bsp casp caspsized dynsgd epsp epspslack grouped groupedsized hps hpsfp hpsint hpsoverlap hpspipe pss ssp; do
  L=tokens; case $s in asp|auto|pss) L=closures;; esac
  for tree in before after; do
    if [ $tree = before ]; then PP=/tmp/an/s80/head; else PP=; fi
    if [ $tree = before ] && [ $N = 1000 ] && case $s in casp|caspsized|grouped|groupedsized) true;; *) false;; esac; then
      echo "$tree|${prof:-quarter4x}|$s N=$N not run (the O(k N^3) split: 0.9 s at 256 workers, ~60x that at 1000)"; continue; fi
    out=$(PROFILE="$prof" LAUNCH=$L PYTHONPATH=$PP timeout 240 /work/main/.venv/bin/python -u pertask.py $N 10 $s 2>/dev/null) || out="$s N=$N timeout"
    echo "$tree|${prof:-quarter4x}|$out"
  done
done; done; done
