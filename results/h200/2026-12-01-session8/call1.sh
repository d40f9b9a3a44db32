#!/usr/bin/env bash
# Session 8, call 1: top-k branch (merged) checks and bench beside SGLang; FP8 attention check --full with every backend (#17).
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
mkdir -p /tmp/tc /tmp/sj; [ -f ../caches.tgz ] && tar -xzf ../caches.tgz -C /tmp
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc TRITON_CACHE_DIR=/tmp/tc SGLANG_JIT_CACHE_DIR=/tmp/sj
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 2 $OUT/$name.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
run 40 check-topk python3 -m harness check --backend cuda --device cuda --ops topk_indices --full
run 60 test-routings python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk.py -k device_routings_bits
C=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024
run 150 bench-topk python3 -m harness bench --backend cuda,sglang --ops topk_indices --cases $C --device cuda --reps 15 --out $OUT/bench-topk.json
DSV4_TOPK_ROUTE=device run 40 bench-topk-devroute python3 -m harness bench --backend cuda --ops topk_indices --cases b64-mixed-to-262144,b64-mixed-to-262144-k1024 --device cuda --reps 15 --out $OUT/bench-topk-devroute.json
run 270 check-fp8-peers python3 -m harness check --backend torch triton cuda sglang deepgemm flashmla flashinfer flashinfer_deterministic --device cuda --ops sparse_attention_fp8 --full --verbose
tar -czf $OUT/caches.tgz -C /tmp tc sj 2>/dev/null; ls -la $OUT/caches.tgz
tar -czf $OUT/logs.tgz -C $OUT --exclude caches.tgz --exclude logs.tgz . 2>/dev/null
grep -hE "^\[" $OUT/bench-*.log | grep -v skip | cut -c1-150
