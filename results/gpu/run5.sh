#!/bin/bash
# Device run of session 22: the 1024-rank torus-2d:32x32 allgather and reduce-scatter whose
# trees are grown step by step under the translations (`grown-s256-r256-c1`, from `synth --topo
# torus-2d:32x32 --coll allgather|reducescatter`; out-of-place XML carried gzipped), run with
# the correctness check. .bin/ holds msccl-run (session 20's build: the runtime did not change
# since), .bin/t32-grown.xml.gz and .bin/t32-rs-grown.xml.gz.
set -u
cd "$(dirname "$0")/../.."
. results/gpu/cuda-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
for c in allgather:t32-grown reducescatter:t32-rs-grown; do
  coll=${c%%:*}; file=${c#*:}
  echo "== torus-2d:32x32 $coll, grown trees"; date +%T
  xml=/tmp/$coll-torus-2d_32x32-grown-s256-r256-c1.xml
  gunzip -c .bin/$file.xml.gz > $xml
  timeout 200 .bin/msccl-run --sizes 1M --iters 1 --warmup 0 --no-graph $xml > $OUT/$file.log 2>&1
  echo "rc $?"
  tail -4 $OUT/$file.log
done
date +%T
