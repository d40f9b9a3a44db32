#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and initcheck over the CUDA backend's quick conformance cases,
# the three tools side by side on the GPU; logs to ${OUT:-out}/sanitizer-<tool>.log. Where the
# sanitizer can filter kernels, only ours are instrumented (torch's float64 reference kernels would
# make racecheck take many minutes; kernels_cuda names its kernels dsv4_*). Exits non-zero if any tool reports an error or a case fails.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
# every kernel of kernels_cuda/ is named dsv4_*: the sanitizer's kernel filter takes a substring
compute-sanitizer --help >"$OUT/sanitizer-help.log" 2>&1
filter=()
if grep -q -- "--kernel-name " "$OUT/sanitizer-help.log"; then
    filter=(--kernel-name kns=dsv4_)
elif grep -q -- "--filter " "$OUT/sanitizer-help.log"; then
    filter=(--filter kns=dsv4_)
fi
echo "sanitizer kernel filter: ${filter[*]:-none (every kernel instrumented)}"
tools=(memcheck racecheck initcheck)
for tool in "${tools[@]}"; do
    compute-sanitizer --tool "$tool" --error-exitcode 99 --target-processes all "${filter[@]}" \
        python3 -m harness check --backend cuda --device cuda --quick "$@" >"$OUT/sanitizer-$tool.log" 2>&1 &
done
status=0
for tool in "${tools[@]}"; do
    wait -n; rc=$?  # each tool's own exit code is re-read from its log below
    [ $rc -eq 0 ] || status=1
done
for tool in "${tools[@]}"; do
    log=$OUT/sanitizer-$tool.log
    echo "$tool: $(grep -m1 'ERROR SUMMARY' "$log" || echo 'no summary'); $(grep -E '^[0-9]+ passed' "$log" || echo 'no check summary')"
done
exit $status
