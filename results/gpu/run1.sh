#!/bin/bash
# Device run: CUDA executor tests, compute programs, catalog benchmark.
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $OUT/nvidia-smi.txt
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; echo "nvrtc: $d"; ls $d/libnvrtc.so*; break; fi
done
echo "== cuda tests"; date +%T
timeout 120 .bin/cuda-tests --test-threads=1 --nocapture 2>&1 | tee $OUT/cuda-tests.log | tail -40
echo "tests rc ${PIPESTATUS[0]}"
echo "== compute programs"; date +%T
for p in .bin/progs/*.json; do
  for dt in f32 bf16; do
    echo "-- $p $dt"
    timeout 30 .bin/msccl-run --sizes 64K:64M:32 --dtype $dt --iters 5 --warmup 2 $p 2>&1 | tail -8
    echo "rc ${PIPESTATUS[0]}"
  done
done 2>&1 | tee $OUT/compute.log
echo "== no-graph compute"; date +%T
timeout 40 .bin/msccl-run --sizes 1M --no-graph --iters 3 --warmup 1 .bin/progs/adam-dgx-a100x2.json .bin/progs/dsl-ring-adam-4.json 2>&1 | tail -8 | tee -a $OUT/compute.log
echo "== catalog bench"; date +%T
SIZES=1K:1G:4 ITERS=10 WARMUP=3 OUTDIR=/tmp/gpu timeout 150 scripts/gpu-bench.sh 2>&1 | tail -60
echo "bench rc $?"; date +%T
