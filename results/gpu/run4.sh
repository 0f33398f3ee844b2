#!/bin/bash
# Device run of session 21: the programs this session's changes write, run on the GPU with the
# correctness check: mi250-16's allreduce two-step receive twins (`-2r`, RCCL flavour, from
# `synth --topo mi250-16 --coll allreduce`), and the one-piece-per-root allgather of the
# 1024-rank torus-2d:32x32 (`listed-s267-r267-c1`, from `synth --topo torus-2d:32x32 --coll
# allgather`; carried gzipped). .bin/ holds msccl-run (session 20's build: the runtime did not
# change since), .bin/progs4 and .bin/t32-listed.xml.gz.
set -u
cd "$(dirname "$0")/../.."
. results/gpu/cuda-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
echo "== mi250-16 allreduce -2r programs"; date +%T
timeout 200 .bin/msccl-run --sizes 1K:64M:16 --iters 3 --warmup 1 --out-dir $OUT/mi250 .bin/progs4/*.xml > $OUT/mi250-2r.log 2>&1
echo "rc $?"
grep -c "^# .bin/progs4" $OUT/mi250-2r.log
awk '$1 ~ /^[0-9]+$/ && NF >= 13 { rows++; if (($9 != "N/A" && $9 != 0) || ($13 != "N/A" && $13 != 0)) bad++ } END { print rows " rows, " bad+0 " with #wrong > 0" }' $OUT/mi250-2r.log
echo "== torus-2d:32x32 allgather, one piece per root"; date +%T
gunzip -c .bin/t32-listed.xml.gz > /tmp/allgather-torus-2d_32x32-listed-s267-r267-c1.xml
timeout 300 .bin/msccl-run --sizes 1M --iters 1 --warmup 0 --no-graph /tmp/allgather-torus-2d_32x32-listed-s267-r267-c1.xml > $OUT/t32.log 2>&1
echo "rc $?"
tail -5 $OUT/t32.log
date +%T
