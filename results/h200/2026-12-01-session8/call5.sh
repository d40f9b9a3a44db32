#!/usr/bin/env bash
# Session 8, call 5: the CUDA top-k plan reached by the harness for the first time: check --full, and the mixed cases planned beside SGLang and device-routed.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
run 30 check-topk python3 -m harness check --backend cuda --device cuda --ops topk_indices --full
DSV4_TOPK_ROUTE=device run 25 bench-topk-devroute python3 -m harness bench --backend cuda --ops topk_indices --cases b64-mixed-to-262144,b64-mixed-to-262144-k1024 --device cuda --reps 15 --out $OUT/bench-topk-mixed-devroute.json
run 90 bench-topk python3 -m harness bench --backend cuda,sglang --ops topk_indices --cases b64-mixed-to-262144,b64-mixed-to-262144-k1024 --device cuda --reps 15 --out $OUT/bench-topk-mixed.json
grep -hE "^\[" $OUT/bench-*.log | grep -v skip | cut -c1-110; grep -h "plan" $OUT/bench-topk.log | head -3
