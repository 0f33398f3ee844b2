#!/bin/bash
# Device run of session 22 (second): dgx-a100x2's grown allgather and its reduce-scatter dual
# (`grown-s15-r15-c13`, 13 pieces per root, from `synth --topo dgx-a100x2 --coll allgather` and
# `--coll reducescatter` at commit 7db9a03), in and out of place, with the correctness check.
# .bin/ holds msccl-run (session 20's build) and .bin/progs5 (the four XML files).
set -u
cd "$(dirname "$0")/../.."
. results/gpu/cuda-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
date +%T
timeout 240 .bin/msccl-run --sizes 1K:64M:16 --iters 3 --warmup 1 .bin/progs5/*.xml > $OUT/a100x2-grown.log 2>&1
echo "rc $?"
grep -c "^# .bin/progs5" $OUT/a100x2-grown.log
awk '$1 ~ /^[0-9]+$/ && NF >= 13 { rows++; if (($9 != "N/A" && $9 != 0) || ($13 != "N/A" && $13 != 0)) bad++ } END { print rows " rows, " bad+0 " with #wrong > 0" }' $OUT/a100x2-grown.log
date +%T
