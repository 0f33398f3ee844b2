#!/bin/bash
set -u
cd "$(dirname "$0")/.."
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64; do
  if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
done
mkdir -p /work/main/runtime; rm -rf /work/shared; cp -r .bin/shared /work/shared
echo "== cuda tests with fixtures"; date +%T
timeout 150 .bin/cuda-tests --test-threads=1 --nocapture gpu:: 2>&1 | tee $OUT/cuda-tests2.log | grep -E "test |result|notice|panick" | head
echo "== catalog subset"; date +%T
SIZES=1M:256M:16 ITERS=10 WARMUP=3 OUTDIR=/tmp/gpu timeout 170 scripts/gpu-bench.sh \
  results/catalog/dgx-a100/algos/allgather-00-dgx-a100-s1-r7-c1-i1.xml \
  results/catalog/dgx-a100/algos/allreduce-02-dgx-a100-rings-s14-r28-c2-i1.xml \
  results/catalog/dgx-a100/algos/reducescatter-00-dgx-a100-s1-r7-c1-i1.inplace.xml \
  results/catalog/dgx-a100/algos/alltoall-00-dgx-a100-s1-r7-c1-i1.xml 2>&1 | grep -vE "^#" | tail -30
date +%T
