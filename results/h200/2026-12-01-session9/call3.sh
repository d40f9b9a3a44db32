#!/usr/bin/env bash
# Session 9, call 3: the session's merged tree (topk-s9a, topk-s9b, attn-s9 on main: the half kernel, rows sized by length, ws attention by default): check --full of the changed ops, the GPU test files, the #13 and #15 cases beside SGLang and FlashMLA in one bench each, and the opt-in A/Bs (FAST_CUTS, EARLY, GROUPS=0, the wide path at 64 x 16384, the ws kernel without its ready fence).
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
CK="python3 -m harness check --backend cuda --device cuda --ops topk_indices --full"
run 40 check-cuda-topk $CK
DSV4_TOPK_FAST_CUTS=7 run 40 check-cuda-topk-cuts7 $CK
DSV4_TOPK_EARLY=1 run 40 check-cuda-topk-early $CK
run 150 check-cuda-attn python3 -m harness check --backend cuda --device cuda --ops sparse_attention,sparse_attention_fp8 --full
run 200 test-gpu python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk.py tests/test_cuda_loader.py tests/test_plans.py
grep -E "^FAILED|^ERROR" $OUT/test-gpu.log | head -10
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024
run 150 bench-topk python3 -m harness bench --backend cuda,sglang --ops topk_indices --device cuda --reps 15 --cases $TK --out $OUT/bench-topk.json
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 150 bench-attn python3 -m harness bench --backend cuda,flashmla --ops sparse_attention --device cuda --reps 10 --cases $AC --out $OUT/bench-attn.json
B="python3 -m harness bench --backend cuda --ops topk_indices --device cuda --reps 15"
DSV4_TOPK_FAST_CUTS=7 run 30 ab-cuts7 $B --cases b64-16384,b64-short --out $OUT/ab.json
DSV4_TOPK_FAST_CUTS=1 run 30 ab-cuts1 $B --cases b64-16384 --out $OUT/ab.json
DSV4_TOPK_KERNEL=wide run 30 ab-wide $B --cases b64-16384 --out $OUT/ab.json
DSV4_TOPK_EARLY=1 run 30 ab-early $B --cases b1-65536,b64-65536 --out $OUT/ab.json
DSV4_TOPK_GROUPS=0 run 30 ab-groups0 $B --cases b64-262144,b64-mixed-to-262144 --out $OUT/ab.json
DSV4_ATTENTION_WS_READY_FENCE=0 run 60 check-attn-nofence python3 -m harness check --backend cuda --device cuda --ops sparse_attention --full
DSV4_ATTENTION_WS_READY_FENCE=0 run 60 ab-attn-nofence python3 -m harness bench --backend cuda --ops sparse_attention --device cuda --reps 10 --cases decode-b64-h64-k640,decode-b64-h128-k1152,prefill-4096-h64-k640 --out $OUT/ab.json
rm -f $OUT/ab.json
grep -hE "^\| (topk|sparse)" $OUT/ab-*.log | cut -c1-100
run 150 check-triton python3 -m harness check --backend triton --device cuda --ops topk_indices,sparse_attention --full
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
for f in $OUT/*.json; do echo "## $(basename $f)"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['records']:
    t=r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {t.get('median_us',0):8.1f} {t.get('clock','')} {r.get('extra',{}).get('events_median_us') or ''}\")
" $f; done
