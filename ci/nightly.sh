#!/usr/bin/env bash
# The nightly GPU job: conformance of every available backend (full cases, sharded one pytest-xdist
# worker per GPU), compute-sanitizer over the CUDA backend (the three tools spread over the GPUs),
# calibration, the v4-flash and v4-pro benchmarks of every backend (one set after the other; with
# NIGHTLY_PARALLEL_BENCH=1 one set per GPU side by side: faster, but ops that plan on the host, like
# compress, then share the CPU with the other set's input building and time noisier), compare against the baseline in
# results/<gpu>/baseline-<set>.json (exit 1 on a slowdown past the gate), and the report.
# Outputs under ${OUT:-out/nightly}. Each step has a time limit (seconds; 0 = none):
# NIGHTLY_CONFORMANCE_S, NIGHTLY_SANITIZE_S, NIGHTLY_BENCH_S; NIGHTLY_SANITIZE=0 skips the sanitizers (for a
# run whose CUDA sources are unchanged since the last clean sanitizer run). On a copy of the tree whose .git is missing
# or stale, set HARNESS_GIT_COMMIT to the commit the copy holds: the results record it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/nightly}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# shellcheck source=ci/use_wheels.sh
source ci/use_wheels.sh
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
[ "$gpus" -ge 1 ] || { echo "nightly: no CUDA device"; exit 2; }
gpu_dir=results/$(python3 -c "import torch; print(torch.cuda.get_device_name().split()[-1].lower())")
status=0
limit() { timeout "${1:-0}" "${@:2}"; }  # timeout 0 runs without a limit

echo "== conformance on $gpus GPU(s)"
limit "${NIGHTLY_CONFORMANCE_S:-0}" python3 -m pytest -q tests/test_conformance.py --full --device cuda -n "$gpus" \
    -p no:cacheprovider >"$OUT/conformance.log" 2>&1 || status=1
tail -n 15 "$OUT/conformance.log"

if [ "${NIGHTLY_SANITIZE:-1}" != 0 ] && python3 -c "import cupy" 2>/dev/null; then
    echo "== compute-sanitizer (cuda backend)"
    OUT=$OUT limit "${NIGHTLY_SANITIZE_S:-0}" bash ci/sanitize.sh || status=1
fi

echo "== calibrate and benchmarks"
python3 -m harness calibrate --device cuda --out "$OUT/calibration.json" | tee "$OUT/calibrate.log"
backends=$(python3 -c "
from harness import backends
print(' '.join('--backend ' + n for n, why in backends.availability(device='cuda').items()
               if why is None and n != 'reference'))")
sets=(v4-flash v4-pro)
pids=()
for i in "${!sets[@]}"; do
    set=${sets[$i]}
    # shellcheck disable=SC2086
    CUDA_VISIBLE_DEVICES=$((i % gpus)) limit "${NIGHTLY_BENCH_S:-0}" python3 -m harness bench $backends --cases "$set" \
        --device cuda --out "$OUT/bench-$set.json" --pytest-benchmark "$OUT/pytest-benchmark-$set.json" \
        --flashinfer-trace "$OUT/flashinfer-trace-$set.jsonl" \
        >"$OUT/bench-$set.log" 2>"$OUT/bench-$set.err" &
    pids+=($!)
    if [ "${NIGHTLY_PARALLEL_BENCH:-0}" != 1 ] || [ $(( (i + 1) % gpus )) -eq 0 ]; then  # wait for this round
        for p in "${pids[@]}"; do wait "$p" || status=1; done
        pids=()
    fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
for set in "${sets[@]}"; do
    echo "-- $set"; cat "$OUT/bench-$set.log"
    [ -f "$OUT/bench-$set.json" ] || continue
    if [ -f "$gpu_dir/baseline-$set.json" ]; then
        python3 -m harness compare --baseline "$gpu_dir/baseline-$set.json" "$OUT/bench-$set.json" \
            | tee "$OUT/compare-$set.log" || status=1
    else
        echo "no baseline $gpu_dir/baseline-$set.json: copy $OUT/bench-$set.json there to start one"
    fi
done
ls "$OUT"/bench-*.json >/dev/null 2>&1 && python3 -m harness report "$OUT"/bench-*.json --out "$OUT/report"
exit $status
