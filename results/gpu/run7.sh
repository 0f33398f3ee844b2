#!/bin/bash
# Device run of session 25: the allreduce programs the main command picks (1 KB-1 GB) after
# session 24's hand-off relabelling (the allgather half takes up pieces in the order the
# reduce-scatter half completes them) and two-step twin skip, run on the GPU with the
# correctness check, in and out of place: dgx-a100x2, dgx-h100x2, dgx1, random:48:2 (nccl
# flavour) and mi250-16x2 (RCCL flavour), from `synth --topo F --coll allreduce --out D` at
# commit 8066263. One msccl-run per fabric, run side by side (16 host cores; the times are
# under that concurrency and all ranks share GPU 0: they are not a fabric's). A last group
# times the direct allgather/alltoall baselines against a plain copy at 256 MB and 1 GB.
# .bin/ holds msccl-run-s25 (runtime at 8066263, stripped) and progs6.tar.gz.
set -u
cd "$(dirname "$0")/../.."
. results/gpu/cuda-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
date +%T
tar -xzf .bin/progs6.tar.gz -C /tmp
BIN=.bin/msccl-run-s25
P=/tmp/progs6
run() { # name, timeout, files...
  local name=$1 limit=$2; shift 2
  timeout "$limit" $BIN --sizes 1K:64M:64 --iters 3 --warmup 1 "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc $?" >> "$OUT/rc.txt"
}
run a100x2 330 $P/allreduce-dgx-a100x2-*.xml &
run h100x2 330 $P/allreduce-dgx-h100x2-*.xml &
run dgx1 330 $P/allreduce-dgx1-*.xml &
run random48 330 $P/allreduce-random_48_2-*.xml &
run mi250x2 330 $P/allreduce-mi250-16x2-*.xml &
timeout 200 $BIN --sizes 256M:1G:4 --iters 5 --warmup 2 --ceiling \
  builtin:direct-allgather:8 builtin:direct-alltoall:8 > "$OUT/copy-ceiling.log" 2>&1 &
wait
date +%T
cat "$OUT/rc.txt"
for f in "$OUT"/*.log; do
  echo "$(basename "$f"): $(grep -c -E '^# (/tmp/progs6/|builtin:)' "$f") programs, $(awk '$1 ~ /^[0-9]+$/ && NF >= 13 { rows++; if (($9 != "N/A" && $9 != 0) || ($13 != "N/A" && $13 != 0)) bad++ } END { print rows+0 " rows, " bad+0 " with #wrong > 0" }' "$f")"
done
