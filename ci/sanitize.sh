#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and initcheck over the CUDA backend's quick conformance cases,
# the three tools side by side on the GPU; logs to ${OUT:-out}/sanitizer-<tool>.log. Exits non-zero
# if any tool reports an error or a case fails. With several GPUs each tool takes one of them, within
# the CUDA_VISIBLE_DEVICES mask the job was given (ci/gpus.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# shellcheck source=ci/gpus.sh
source ci/gpus.sh
# racecheck looks only at shared memory, and torch's float64 reference kernels would keep it busy
# for many minutes: it checks our kernels alone (kernels_cuda names every kernel dsv4_*). memcheck
# and initcheck watch every kernel: initcheck must see torch's writes to know memory is initialised.
compute-sanitizer --help >"$OUT/sanitizer-help.log" 2>&1
race_filter=()
if grep -q -- "--kernel-name " "$OUT/sanitizer-help.log"; then
    race_filter=(--kernel-name kns=dsv4_)
fi
echo "racecheck kernel filter: ${race_filter[*]:-none (every kernel instrumented)}"
tools=(memcheck racecheck initcheck)
i=0
for tool in "${tools[@]}"; do  # one GPU each where the job has several
    filter=()
    [ "$tool" = racecheck ] && filter=("${race_filter[@]}")
    pin=()
    [ "$gpu_count" -gt 1 ] && pin=(env CUDA_VISIBLE_DEVICES="$(gpu_for $i)")
    echo "$tool on GPU ${pin[*]:+$(gpu_for $i)}${pin[*]:-as given (${CUDA_VISIBLE_DEVICES:-all})}"
    "${pin[@]}" compute-sanitizer --tool "$tool" --error-exitcode 99 --target-processes all "${filter[@]}" \
        python3 -m harness check --backend cuda --device cuda --quick "$@" >"$OUT/sanitizer-$tool.log" 2>&1 &
    i=$((i + 1))
done
status=0
for tool in "${tools[@]}"; do
    wait -n || status=1
done
for tool in "${tools[@]}"; do
    log=$OUT/sanitizer-$tool.log
    echo "$tool: $(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$log" || echo 'no summary'); $(grep -E '^[0-9]+ passed' "$log" || echo 'no check summary')"
done
exit $status
