#!/usr/bin/env bash
# Session 9, call 1: branch topk-s8 merged (kept-bits walk for wide<2/4/8>, barrier moves): check --full, the plan's and slot-order GPU tests, and the ten #13 cases beside SGLang.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
run 40 check-topk python3 -m harness check --backend cuda --device cuda --ops topk_indices --full
run 60 test-topk-gpu python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk.py -k "device_routings_bits or slots_on_the_gpu_are_the_models_in_order"
grep -E "FAILED|Error|assert" $OUT/test-topk-gpu.log | head -10
run 150 bench-topk python3 -m harness bench --backend cuda,sglang --ops topk_indices --cases b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024 --device cuda --reps 15 --out $OUT/bench-topk.json
grep -hE "^\[" $OUT/bench-topk.log | grep -v skip | cut -c1-120
