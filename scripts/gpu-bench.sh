#!/usr/bin/env bash
# GPU benchmark of synthesized MSCCL programs, run on the device machine in one call.
# Builds nothing: runs the x86-64 binary .bin/msccl-run (built elsewhere with
#   cargo build --release -p runtime --features cuda --bin msccl-run
# and copied to .bin/), which needs only libcuda and NVRTC at run time.
#
# usage: scripts/gpu-bench.sh [XML...]
#   Without arguments: every XML in results/catalog/dgx1 and results/catalog/dgx-a100.
#   Always adds ring and direct baselines for the rank counts seen, and a plain
#   device-to-device copy of the same sizes as the ceiling.
# env: SIZES (default 1K:1G), DTYPE (f32), ITERS (20), WARMUP (5), SLICES (1),
#      EXTRA (more msccl-run options), BIN (.bin/msccl-run), OUTDIR (results/gpu).
# Writes OUTDIR/summary.md, one OUTDIR/<program>.md per program, busbw.svg, algbw.svg,
# results.json and run.log; with $OUT set (the device tool) also copies the reports there.
set -u -o pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.bin/msccl-run}
OUTDIR=${OUTDIR:-results/gpu}
SIZES=${SIZES:-1K:1G}
DTYPE=${DTYPE:-f32}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
SLICES=${SLICES:-1}

if [ ! -x "$BIN" ]; then
  echo "gpu-bench: $BIN is missing: build it with 'cargo build --release -p runtime --features cuda --bin msccl-run' and copy it to .bin/" >&2
  exit 2
fi

# NVRTC lives in the CUDA toolkit (or a pip wheel, such as the one scripts/setup installs), not
# in the driver: find it.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
         "${SYNTH_NVRTC_DIR:-$HOME/.cache/synth/nvrtc}/nvidia/cuda_nvrtc/lib" \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then
    export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    break
  fi
done

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for d in results/catalog/dgx1 results/catalog/dgx-a100; do
    [ -d "$d" ] && while IFS= read -r f; do files+=("$f"); done < <(find "$d" -name '*.xml' | sort)
  done
fi

# Baselines for every rank count the programs use (8 when there are none).
ranks=$(for f in "${files[@]}"; do grep -o 'ngpus="[0-9]*"' "$f" | head -1 | tr -dc '0-9'; echo; done | sort -un | grep . || true)
[ -z "$ranks" ] && ranks=8
baselines=()
for n in $ranks; do
  baselines+=("builtin:ring-allreduce:$n" "builtin:ring-allgather:$n" "builtin:ring-reducescatter:$n"
              "builtin:direct-alltoall:$n" "builtin:direct-allgather:$n")
done

mkdir -p "$OUTDIR"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUTDIR/nvidia-smi.txt"
echo "gpu-bench: ${#files[@]} program(s), baselines: ${baselines[*]}"
# shellcheck disable=SC2086
"$BIN" --sizes "$SIZES" --dtype "$DTYPE" --iters "$ITERS" --warmup "$WARMUP" --slices "$SLICES" \
  --ceiling --out-dir "$OUTDIR" ${EXTRA:-} "${files[@]}" "${baselines[@]}" 2>&1 | tee "$OUTDIR/run.log"
rc=${PIPESTATUS[0]}

if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  tar -czf "$OUT/gpu-results.tar.gz" "$OUTDIR"
  for f in summary.md busbw.svg algbw.svg run.log; do
    [ -f "$OUTDIR/$f" ] && cp "$OUTDIR/$f" "$OUT/"
  done
fi
echo "gpu-bench: exit $rc; reports in $OUTDIR"
exit "$rc"
