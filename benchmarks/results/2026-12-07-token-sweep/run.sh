# The sweeps of this folder (one core, pure Python; ~10 min in all). Frozen at the commit in README.md.
T=tf-hetero
S=hps,hpsoverlap,epsp,bsp
for C in uncontended calibration; do
  for L in tokens closures; do
    $T sim --strategies $S --workers 4,64,256,1000 --rounds 100 --throughput-only --costs tf_hetero/sim/$C.json --launch $L --out-dir sw/${C}_${L}_r100
  done
done
for L in tokens closures; do
  $T sim --strategies hps,hpsoverlap --workers 4,64,256 --rounds 1000 --throughput-only --costs tf_hetero/sim/uncontended.json --launch $L --out-dir sw/uncontended_${L}_r1000
done
