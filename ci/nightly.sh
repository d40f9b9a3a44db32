#!/usr/bin/env bash
# The nightly GPU job: conformance of every available backend (full cases, sharded one pytest-xdist
# worker per GPU), compute-sanitizer over the CUDA backend, the v4-flash and v4-pro benchmarks of
# every backend, compare against the baseline in results/<gpu>/baseline-<set>.json (exit 1 on a
# slowdown past the gate), and the report. Outputs under ${OUT:-out/nightly}.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/nightly}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export HARNESS_GIT_COMMIT=${HARNESS_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
[ "$gpus" -ge 1 ] || { echo "nightly: no CUDA device"; exit 2; }
gpu_dir=results/$(python3 -c "import torch; print(torch.cuda.get_device_name().split()[-1].lower())")
status=0

echo "== conformance on $gpus GPU(s)"
python3 -m pytest -q tests/test_conformance.py --full --device cuda -n "$gpus" 2>&1 | tee "$OUT/conformance.log" \
    || status=1

if python3 -c "import cupy" 2>/dev/null; then
    echo "== compute-sanitizer (cuda backend)"
    OUT=$OUT bash ci/sanitize.sh || status=1
fi

echo "== calibrate and benchmarks"
python3 -m harness calibrate --device cuda --out "$OUT/calibration.json" | tee "$OUT/calibrate.log"
backends=$(python3 -c "
from harness import backends
print(' '.join('--backend ' + n for n, why in backends.availability(device='cuda').items()
               if why is None and n != 'reference'))")
for set in v4-flash v4-pro; do
    # shellcheck disable=SC2086
    python3 -m harness bench $backends --cases "$set" --device cuda --out "$OUT/bench-$set.json" \
        --pytest-benchmark "$OUT/pytest-benchmark-$set.json" 2>"$OUT/bench-$set.err" | tee "$OUT/bench-$set.log" \
        || status=1
    if [ -f "$gpu_dir/baseline-$set.json" ]; then
        python3 -m harness compare --baseline "$gpu_dir/baseline-$set.json" "$OUT/bench-$set.json" \
            | tee "$OUT/compare-$set.log" || status=1
    else
        echo "no baseline $gpu_dir/baseline-$set.json: copy $OUT/bench-$set.json there to start one"
    fi
done
python3 -m harness report "$OUT"/bench-*.json --out "$OUT/report"
exit $status
