#!/usr/bin/env bash
# Session 10, call 2: the helpers' drafts merged (trial-s10 at $1): every switch's check --full and GPU tests,
# then benches: the defaults beside FlashMLA / SGLang, each switch (cuda only) at the cases it routes.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
CK="python3 -m harness check --backend cuda --device cuda --full"
# correctness, all at once (JIT-free: cubins prebuilt for each define set)
( run 200 chk-attn-smem env DSV4_ATTENTION_WS_EPILOGUE=smem $CK --ops sparse_attention ) &
( run 200 chk-attn-fused env DSV4_ATTENTION_COMBINE=fused $CK --ops sparse_attention ) &
( run 200 chk-attn-both env DSV4_ATTENTION_WS_EPILOGUE=smem DSV4_ATTENTION_COMBINE=fused $CK --ops sparse_attention ) &
( run 200 chk-topk-wide16 env DSV4_TOPK_LONG=wide16 $CK --ops topk_indices ) &
( run 200 chk-topk-lean16 env DSV4_TOPK_LEAN=16 $CK --ops topk_indices ) &
( run 200 chk-topk-lean16r env DSV4_TOPK_LEAN=16r $CK --ops topk_indices ) &
( run 200 chk-topk-pairs env DSV4_TOPK_PAIRS=1 $CK --ops topk_indices ) &
( run 200 test-topk python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk.py tests/test_cuda_topk_lean.py ) &
wait
grep -E "^FAILED|^ERROR" $OUT/test-topk.log | head -12
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
B="python3 -m harness bench --device cuda --reps 10"
run 200 bench-attn $B --backend cuda,flashmla --ops sparse_attention --cases $AC --out $OUT/attn-default.json
DSV4_ATTENTION_WS_EPILOGUE=smem run 120 bench-attn-smem $B --backend cuda --ops sparse_attention --cases $AC --out $OUT/attn-smem.json
DSV4_ATTENTION_WS_EPILOGUE=smem DSV4_ATTENTION_COMBINE=fused run 120 bench-attn-both $B --backend cuda --ops sparse_attention --cases $AC --out $OUT/attn-both.json
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 200 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $OUT/topk-default.json
L=b64-262144,b64-mixed-to-262144,b64-mixed-to-262144-k1024,b64-65536
DSV4_TOPK_LONG=wide16 run 90 bench-topk-wide16 $B --reps 15 --backend cuda --ops topk_indices --cases $L --out $OUT/topk-wide16.json
DSV4_TOPK_LONG=wide16-prefetch run 90 bench-topk-wide16p $B --reps 15 --backend cuda --ops topk_indices --cases $L --out $OUT/topk-wide16p.json
for v in 8 16 16r 8r; do DSV4_TOPK_LEAN=$v run 60 bench-topk-lean$v $B --reps 15 --backend cuda --ops topk_indices --cases b1-65536,b1-65536-k1024 --out $OUT/topk-lean$v.json; done
DSV4_TOPK_EARLY=1 DSV4_TOPK_LEAN=16r run 60 bench-topk-lean16r-early $B --reps 15 --backend cuda --ops topk_indices --cases b1-65536,b64-65536 --out $OUT/topk-lean16r-early.json
DSV4_TOPK_PAIRS=1 run 60 bench-topk-pairs $B --reps 15 --backend cuda --ops topk_indices --cases b64-16384,b256-16384 --out $OUT/topk-pairs.json
cd $OUT && tar czf logs.tgz *.log && rm -f *.log && mkdir -p j && mv *.json j/ && tar czf json.tgz j && rm -rf j
python3 - <<'PY'
import json, tarfile, io
t = tarfile.open("json.tgz")
for m in sorted(t.getmembers(), key=lambda m: m.name):
    if not m.isfile(): continue
    d = json.load(t.extractfile(m))
    print("##", m.name)
    for r in d["records"]:
        tm = r.get("timing") or {}
        print(f"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {tm.get('median_us',0):8.1f} {tm.get('clock','')[:10]} {r.get('extra',{}).get('events_median_us') or ''}")
PY
