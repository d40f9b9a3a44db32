#!/usr/bin/env bash
# Session 8, call 4: top-k with 8-CTA clusters by default (check --full, the plan's bitwise test, bench beside SGLang, the mixed A/B);
# FP8 attention check with every backend from case k1 on (call 2 covered the 14 cases before it).
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc TRITON_CACHE_DIR=/tmp/tc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
run 40 check-topk python3 -m harness check --backend cuda --device cuda --ops topk_indices --full
run 60 test-routings python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk.py -k device_routings_bits
C=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024
run 120 bench-topk python3 -m harness bench --backend cuda,sglang --ops topk_indices --cases $C --device cuda --reps 15 --out $OUT/bench-topk.json
DSV4_TOPK_ROUTE=device run 30 bench-topk-devroute python3 -m harness bench --backend cuda --ops topk_indices --cases b64-mixed-to-262144,b64-mixed-to-262144-k1024 --device cuda --reps 15 --out $OUT/bench-topk-devroute.json
F="k1 v4-flash-decode v4-pro-decode hca-8192 $(python3 -m harness check --list-cases --ops sparse_attention_fp8 --full | grep -oE 'bad-[a-z_]+-[0-9]+' | tr '\n' ' ')"
run 320 check-fp8-peers-tail python3 -m harness check --backend torch triton cuda sglang deepgemm flashmla flashinfer flashinfer_deterministic --device cuda --ops sparse_attention_fp8 --full --verbose --case $F
tar -czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
grep -hE "^\[" $OUT/bench-*.log | grep -v skip | cut -c1-110
