#!/bin/bash
# Device run of session 27: session 26's reductions on the GPU, with the correctness check.
# Arrival-ordered reductions (every reducing program lowered at 49b72a6) and the `-lr` twins
# (joined messages received into temporaries, reduced on local threadblocks): every
# reduce-scatter/allreduce JSON that `synth --topo F --coll C --out D` wrote at 49b72a6 for
# amd8 and mi250 (RCCL flavour), dgx-h100x2 and dgx-a100x2 (nccl flavour), relowered with
# "local_reductions": true by `synth lower`, plus the -lr and 38-piece programs the main
# command itself wrote (in and out of place) and mi250's reduce-scatter picks. One msccl-run
# per group, side by side: all ranks share GPU 0 and the host, so the times are not a fabric's.
# .bin/ holds msccl-run-s27 (runtime at 49b72a6, stripped) and progs8.tar.gz.
set -u
cd "$(dirname "$0")/../.."
. results/gpu/cuda-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
date +%T
tar -xzf .bin/progs8.tar.gz -C /tmp
BIN=.bin/msccl-run-s27
P=/tmp/progs8
run() { # name, timeout, files...
  local name=$1 limit=$2; shift 2
  timeout "$limit" $BIN --sizes 4K:4M:1024 --iters 2 --warmup 1 "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc $?" >> "$OUT/rc.txt"
}
AR=($P/amd8ar/*.xml); H=$(( ${#AR[@]} / 2 ))
run amd8rs 280 $P/amd8rs/*.xml &
run amd8ar1 280 "${AR[@]:0:$H}" &
run amd8ar2 280 "${AR[@]:$H}" &
run h100rs 280 $P/h100rs/*.xml &
run h100ar 280 $P/h100ar/*.xml &
run a100rs 280 $P/a100rs/*.xml &
run mi250rs 280 $P/mi250rs/*.xml &
wait
date +%T
cat "$OUT/rc.txt"
for f in "$OUT"/*.log; do
  echo "$(basename "$f"): $(grep -c -E '^# /tmp/progs8/' "$f") programs, $(awk '$1 ~ /^[0-9]+$/ && NF >= 13 { rows++; if (($9 != "N/A" && $9 != 0) || ($13 != "N/A" && $13 != 0)) bad++ } END { print rows+0 " rows, " bad+0 " with #wrong > 0" }' "$f")"
done
