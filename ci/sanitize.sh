#!/usr/bin/env bash
# compute-sanitizer over the CUDA backend's quick conformance cases, one tool at a time; logs to
# ${OUT:-out}/sanitizer-<tool>.log. Exits non-zero if any tool reports an error or a case fails.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
status=0
for tool in memcheck racecheck initcheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 99 --target-processes all \
        python3 -m harness check --backend cuda --device cuda --quick "$@" >"$OUT/sanitizer-$tool.log" 2>&1
    rc=$?
    echo "$tool: exit $rc, $(grep -c '========= ' "$OUT/sanitizer-$tool.log") sanitizer lines, $(tail -1 "$OUT/sanitizer-$tool.log")"
    [ $rc -eq 0 ] || status=1
done
exit $status
