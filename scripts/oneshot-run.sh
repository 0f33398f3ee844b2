#!/bin/sh
# The one-shot allreduce of `synth --topo dgx-h100 --coll allreduce` lowered in every flavour
# at 1 and 2 instances, verified (`synth verify`), then run on the CPU executor at 1 KB,
# 32 KB and 1 MB, out of place and in place: prints #wrong per size.
set -e
S=${SYNTH:-synth}
A=out/allreduce-dgx-h100-oneshot-s1-r56-c1
for flavor in nccl rccl legacy; do
  for inst in 1 2; do
    d=out/oneshot-$flavor-$inst
    $S lower $A.json --flavor $flavor --instances $inst --out $d >/dev/null
    for x in $d/*.xml; do
      $S verify $x >/dev/null && v=verified || v=FAILED
      w=$($S run $x --sizes 1K:1M:32 --iters 1 --warmup 0 --json |
        python3 -c 'import json,sys; print(" ".join("%d B: %d" % (r["size"], r["wrong"]) for r in json.load(sys.stdin)["rows"]))')
      echo "$flavor instances=$inst $(basename $x): $v; wrong $w"
    done
  done
done
