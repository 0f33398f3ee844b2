#!/bin/bash
# Device run of session 29: session 28's address-channel twins (`-ac`, `-ac-2r`) on the GPU,
# with the correctness check. Every XML file whose name holds `-ac` that
# `synth --topo F --coll C --out D` wrote at cb9d4a4 (in and out of place) for mi250
# reduce-scatter and allreduce, mi250-16 reduce-scatter, amd4 allreduce (RCCL flavour),
# dgx-a100, dgx-h100, dgx2, dgx-a100x2 allreduce and dgx-h100x2 reduce-scatter (nccl).
# The runtime is unchanged since 49b72a6, so .bin/ holds session 27's msccl-run-s27 and
# progs9.tar.gz. One msccl-run per fabric, side by side: all ranks share GPU 0 and the host,
# so the times are not a fabric's.
set -u
cd "$(dirname "$0")/../.."
. results/gpu/cuda-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
date +%T
tar -xzf .bin/progs9.tar.gz -C /tmp
BIN=.bin/msccl-run-s27
P=/tmp/progs9
run() { # name, timeout, files...
  local name=$1 limit=$2; shift 2
  timeout "$limit" $BIN --sizes 4K:4M:1024 --iters 2 --warmup 1 "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc $?" >> "$OUT/rc.txt"
}
for d in "$P"/*/; do
  run "$(basename "$d")" 200 "$d"*.xml &
done
wait
date +%T
# mi250's reduce-scatter twins at 256 MB, one process alone.
timeout 90 $BIN --sizes 256M --iters 3 --warmup 1 "$P"/mi250-reducescatter/*.xml > "$OUT/mi250rs-256M.log" 2>&1
echo "mi250rs-256M rc $?" >> "$OUT/rc.txt"
date +%T
cat "$OUT/rc.txt"
for f in "$OUT"/*.log; do
  echo "$(basename "$f"): $(grep -c -E '^# /tmp/progs9/' "$f") programs, $(awk '$1 ~ /^[0-9]+$/ && NF >= 13 { rows++; if (($9 != "N/A" && $9 != 0) || ($13 != "N/A" && $13 != 0)) bad++ } END { print rows+0 " rows, " bad+0 " with #wrong > 0" }' "$f")"
done
