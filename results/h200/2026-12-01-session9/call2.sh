#!/usr/bin/env bash
# Session 9, call 2: the helpers' first drafts merged (trial tree): top-k opt-ins (DSV4_TOPK_FAST=bits/half, GROUPS, PREFETCH, QUARTERS) checked --full and timed cuda-only beside the default; the ws attention kernel checked --full and timed beside FlashMLA.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
CK="python3 -m harness check --backend cuda --device cuda --ops topk_indices --full"
run 40 check-topk-default $CK
DSV4_TOPK_FAST=bits run 40 check-topk-fastbits $CK
DSV4_TOPK_FAST=half run 40 check-topk-fasthalf $CK
DSV4_TOPK_GROUPS=1 run 40 check-topk-groups $CK
DSV4_TOPK_PREFETCH=1 run 40 check-topk-prefetch $CK
DSV4_TOPK_QUARTERS=1 run 40 check-topk-quarters $CK
run 90 test-topk-gpu python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk.py
grep -E "FAILED|Error" $OUT/test-topk-gpu.log | head -10
B="python3 -m harness bench --backend cuda --ops topk_indices --device cuda --reps 15"
ALL=b64-16384,b256-16384,b256-16384-k1024,b64-65536,b64-262144,b1-65536,b64-mixed-to-262144,b64-mixed-to-262144-k1024
run 60 bench-topk-default $B --cases $ALL --out $OUT/t-default.json
DSV4_TOPK_FAST=bits run 30 bench-topk-fastbits $B --cases b64-16384,b256-16384,b256-16384-k1024 --out $OUT/t-fastbits.json
DSV4_TOPK_FAST=half run 30 bench-topk-fasthalf $B --cases b64-16384,b256-16384,b256-16384-k1024 --out $OUT/t-fasthalf.json
DSV4_TOPK_GROUPS=1 run 30 bench-topk-groups $B --cases b64-mixed-to-262144,b64-mixed-to-262144-k1024 --out $OUT/t-groups.json
DSV4_TOPK_GROUPS=1 DSV4_TOPK_GROUPS_BOUND=32768 run 30 bench-topk-groups32k $B --cases b64-mixed-to-262144,b64-mixed-to-262144-k1024 --out $OUT/t-groups32k.json
DSV4_TOPK_PREFETCH=1 run 30 bench-topk-prefetch $B --cases b64-65536,b64-262144,b1-65536,b64-mixed-to-262144 --out $OUT/t-prefetch.json
DSV4_TOPK_QUARTERS=1 run 30 bench-topk-quarters $B --cases b64-65536,b64-262144,b1-65536,b64-mixed-to-262144 --out $OUT/t-quarters.json
DSV4_ATTENTION_KERNEL=ws run 150 check-attn-ws python3 -m harness check --backend cuda --device cuda --ops sparse_attention --full
grep -E "fail|error" $OUT/check-attn-ws.log | head -5
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
DSV4_ATTENTION_KERNEL=ws run 150 bench-attn-ws python3 -m harness bench --backend cuda,flashmla --ops sparse_attention --device cuda --reps 10 --cases $AC --out $OUT/a-ws.json
run 90 bench-attn-default python3 -m harness bench --backend cuda --ops sparse_attention --device cuda --reps 10 --cases $AC --out $OUT/a-default.json
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
for f in $OUT/*.json; do echo "## $(basename $f)"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['records']:
    t=r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {t.get('median_us',0):8.1f} {t.get('clock','')}\")
" $f; done
