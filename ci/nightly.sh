#!/usr/bin/env bash
# The nightly GPU job, in stages: conformance of every available backend (full cases, sharded one
# pytest-xdist worker per GPU, JUnit XML), compute-sanitizer over the CUDA backend (the three tools spread
# over the GPUs), calibration, the v4-flash and v4-pro benchmarks of every backend (one set after the other;
# with NIGHTLY_PARALLEL_BENCH=1 one set per GPU side by side: faster, but ops that plan on the host, like
# compress, then share the CPU with the other set's input building and time noisier), compare against the
# baseline in results/<gpu>/baseline-<set>.json (fails on a case slower past the gate, missing or failing),
# and the report. Every stage's failure fails the job.
#
# Usage: ci/nightly.sh [STAGE ...]   STAGE: conformance sanitize calibrate bench compare report (default: all,
# in that order; a CI workflow runs one step per stage so its UI shows which failed). Outputs under
# ${OUT:-out/nightly}. The job stays on the GPUs CUDA_VISIBLE_DEVICES gives it (ci/gpus.sh). Time limits per
# stage (seconds; 0 = none): NIGHTLY_CONFORMANCE_S, NIGHTLY_SANITIZE_S, NIGHTLY_BENCH_S; NIGHTLY_SANITIZE=0 skips
# the sanitizers (for a run whose CUDA sources are unchanged since the last clean sanitizer run). With
# GITHUB_STEP_SUMMARY set, the conformance tail and the comparisons are appended to it (the workflow adds the report). On a copy of
# the tree whose .git is missing or stale, set HARNESS_GIT_COMMIT to the commit the copy holds: the results record it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/nightly}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# shellcheck source=ci/use_wheels.sh
source ci/use_wheels.sh
# shellcheck source=ci/gpus.sh
source ci/gpus.sh
all_stages=(conformance sanitize calibrate bench compare report)
stages=("${@:-${all_stages[@]}}")
for stage in "${stages[@]}"; do
    [[ " ${all_stages[*]} " == *" $stage "* ]] || { echo "nightly: unknown stage $stage (${all_stages[*]})"; exit 2; }
done
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
[ "${gpus:-0}" -ge 1 ] || { echo "nightly: no CUDA device"; exit 2; }
gpu_dir=results/$(python3 -c "import torch; print(torch.cuda.get_device_name().split()[-1].lower())")
sets=(v4-flash v4-pro)
limit() { timeout "${1:-0}" "${@:2}"; }  # timeout 0 runs without a limit
summary() { if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat >>"$GITHUB_STEP_SUMMARY"; else cat >/dev/null; fi; }

conformance() {
    echo "== conformance on $gpus GPU(s) (${CUDA_VISIBLE_DEVICES:-every GPU})"
    local rc=0
    limit "${NIGHTLY_CONFORMANCE_S:-0}" python3 -m pytest -q tests/test_conformance.py --full --device cuda -n "$gpus" \
        -p no:cacheprovider --junitxml "$OUT/conformance.xml" >"$OUT/conformance.log" 2>&1 || rc=1
    tail -n 15 "$OUT/conformance.log"
    printf '## conformance\n\n```\n%s\n```\n' "$(tail -n 15 "$OUT/conformance.log")" | summary
    return $rc
}

sanitize() {
    if [ "${NIGHTLY_SANITIZE:-1}" = 0 ]; then echo "== compute-sanitizer: skipped (NIGHTLY_SANITIZE=0)"; return 0; fi
    if ! python3 -c "import cupy" 2>/dev/null; then echo "== compute-sanitizer: skipped (no CuPy)"; return 0; fi
    echo "== compute-sanitizer (cuda backend)"
    OUT=$OUT limit "${NIGHTLY_SANITIZE_S:-0}" bash ci/sanitize.sh
}

calibrate() {
    echo "== calibrate"
    python3 -m harness calibrate --device cuda --out "$OUT/calibration.json" | tee "$OUT/calibrate.log"
}

bench() {
    echo "== benchmarks"
    local backends rc=0 pids=() i set
    backends=$(python3 -c "
from harness import backends
print(' '.join('--backend ' + n for n, why in backends.availability(device='cuda').items()
               if why is None and n != 'reference'))") || return 1
    for i in "${!sets[@]}"; do
        set=${sets[$i]}
        # shellcheck disable=SC2086
        CUDA_VISIBLE_DEVICES=$(gpu_for "$i") limit "${NIGHTLY_BENCH_S:-0}" python3 -m harness bench $backends \
            --cases "$set" --device cuda --out "$OUT/bench-$set.json" \
            --pytest-benchmark "$OUT/pytest-benchmark-$set.json" --flashinfer-trace "$OUT/flashinfer-trace-$set.jsonl" \
            >"$OUT/bench-$set.log" 2>"$OUT/bench-$set.err" &
        pids+=($!)
        if [ "${NIGHTLY_PARALLEL_BENCH:-0}" != 1 ] || [ $(((i + 1) % gpu_count)) -eq 0 ]; then  # wait for this round
            for p in "${pids[@]}"; do wait "$p" || rc=1; done
            pids=()
        fi
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    for set in "${sets[@]}"; do echo "-- $set"; cat "$OUT/bench-$set.log"; done
    return $rc
}

compare() {
    echo "== compare against results/<gpu>/baseline-<set>.json"
    local rc=0 set
    for set in "${sets[@]}"; do
        if [ ! -f "$OUT/bench-$set.json" ]; then
            echo "no $OUT/bench-$set.json: the bench stage did not write it"; rc=1; continue
        fi
        if [ -f "$gpu_dir/baseline-$set.json" ]; then
            python3 -m harness compare --baseline "$gpu_dir/baseline-$set.json" "$OUT/bench-$set.json" \
                | tee "$OUT/compare-$set.log" || rc=1
            printf '## compare %s\n\n%s\n' "$set" "$(cat "$OUT/compare-$set.log")" | summary
        else
            echo "no baseline $gpu_dir/baseline-$set.json: copy $OUT/bench-$set.json there to start one"
        fi
    done
    return $rc
}

report() {
    echo "== report"
    compgen -G "$OUT/bench-*.json" >/dev/null || { echo "no $OUT/bench-*.json to report"; return 1; }
    python3 -m harness report "$OUT"/bench-*.json --out "$OUT/report"
}

# CUDA_VISIBLE_DEVICES as given reaches every stage; only the bench shards narrow it to one of its entries
[ "$gpu_count" -ge 1 ] || { gpu_ids=($(seq 0 $((gpus - 1)))); gpu_count=$gpus; }
status=0
for stage in "${stages[@]}"; do
    "$stage" || { status=1; echo "nightly: stage $stage failed"; }
done
exit $status
