#!/bin/bash
# Device run of session 20: the CUDA executor's tests on the final code, then the allreduce
# shapes of issue 29 (one-shot, two-shot, direct greedy, direct SMT, NCCL trees, reduce +
# broadcast trees/rings/shallow/listed; the one-shot also lowered for rccl and legacy and with
# 2 instances) run on the GPU with the correctness check, f32 and bf16, in and out of place.
# .bin/ holds msccl-run, the cuda test binary, ../shared and .bin/progs3 (see results/gpu/README.md).
set -u
cd "$(dirname "$0")/../.."
. results/gpu/cuda-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $OUT/nvidia-smi.txt
mkdir -p /work/main/runtime; rm -rf /work/shared; cp -r .bin/shared /work/shared
echo "== cuda tests"; date +%T
timeout 150 .bin/cuda-tests --test-threads=1 --nocapture 2>&1 | tee $OUT/cuda-tests3.log | grep -E "^test |test result|notice|panicked" | head -20
echo "== allreduce shapes"; date +%T
for dt in f32 bf16; do
  echo "-- dtype $dt"
  timeout 150 .bin/msccl-run --sizes 1K:64M:16 --dtype $dt --iters 3 --warmup 1 --out-dir $OUT/shapes-$dt .bin/progs3/*.xml 2>&1
  echo "rc $?"
done > $OUT/allreduce-shapes.log 2>&1
grep -c "^# .bin/progs3" $OUT/allreduce-shapes.log; grep -E "^rc|^msccl-run" $OUT/allreduce-shapes.log | head -20
awk '$1 ~ /^[0-9]+$/ && NF >= 13 { rows++; if ($9 != 0 || ($13 != "N/A" && $13 != 0)) bad++ } END { print rows " rows, " bad+0 " with #wrong > 0" }' $OUT/allreduce-shapes.log
date +%T
