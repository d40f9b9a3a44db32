#!/usr/bin/env bash
# Session 11, call 4 ($1 = commit, the submitted tree): cuda check --full of top-k, attention and FP8 attention, the
# top-k GPU tests, then the #13 and #15 cases beside SGLang and FlashMLA in one bench run each.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
CK="python3 -m harness check --backend cuda --device cuda --full"
( run 200 chk-cuda-topk $CK --ops topk_indices ) &
( run 200 chk-cuda-attn $CK --ops sparse_attention ) &
( run 200 chk-cuda-fp8 $CK --ops sparse_attention_fp8 ) &
( run 200 test-gpu python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_topk.py tests/test_cuda_topk_lean.py tests/test_cuda_topk_twin.py tests/test_cuda_topk_s11b.py tests/test_cuda_attention_merge.py ) &
wait
grep -E "^FAILED|^ERROR|passed|failed" $OUT/test-gpu.log | tail -6
B="python3 -m harness bench --device cuda"
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 200 bench-attn $B --reps 10 --backend cuda,flashmla --ops sparse_attention --cases $AC --out $OUT/bench-attn.json
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 200 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $OUT/bench-topk.json
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
for f in $OUT/*.json; do echo "## $(basename $f)"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['records']:
    t=r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {t.get('median_us',0):8.1f} {t.get('clock','')[:10]} {r.get('tflops') or 0:.0f}TF {r.get('pct_copy') or 0:.1f}%\")
" $f; done
