#!/usr/bin/env bash
# One GPU session's work: conformance of the given backends at test and production shapes, then the
# V4 benchmarks. Logs and result files go to ${OUT:-out}. Usage: ci/gpu_run.sh [BACKEND ...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
# shellcheck source=ci/use_wheels.sh
source ci/use_wheels.sh
backends=("${@:-triton}")
flags=()
for b in "${backends[@]}"; do flags+=(--backend "$b"); done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
status=0
python3 -m harness check "${flags[@]}" --device cuda --full 2>&1 | tee "$OUT/check.log" || status=1
for set in v4-flash v4-pro; do
    python3 -m harness bench "${flags[@]}" --backend torch --cases "$set" --device cuda \
        --out "$OUT/bench-$set.json" 2>"$OUT/bench-$set.err" | tee "$OUT/bench-$set.log" || status=1
done
exit $status
