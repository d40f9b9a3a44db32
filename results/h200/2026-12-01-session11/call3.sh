#!/usr/bin/env bash
# Session 11, call 3 ($1 = commit, main after merging the three helper branches): the defaults and every new switch
# checked; the defaults beside FlashMLA and SGLang, then the switches (beside the peer where a default may follow).
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
export -f run
CK="python3 -m harness check --backend cuda --device cuda --full"
( run 250 chk-attn $CK --ops sparse_attention ) &
( DSV4_ATTENTION_WS_FLAGS=smem run 250 chk-attn-flags $CK --ops sparse_attention ) &
( DSV4_ATTENTION_WS_SOFTMAX=ffma run 250 chk-attn-ffma $CK --ops sparse_attention ) &
( DSV4_ATTENTION_PERSISTENT=1 run 250 chk-attn-persistent $CK --ops sparse_attention ) &
( DSV4_ATTENTION_WS_FLAGS=smem DSV4_ATTENTION_WS_SOFTMAX=ffma DSV4_ATTENTION_PERSISTENT=1 run 250 chk-attn-all $CK --ops sparse_attention ) &
( run 250 chk-fp8 $CK --ops sparse_attention_fp8 ) &
( run 250 chk-topk $CK --ops topk_indices ) &
( DSV4_TOPK_LONG_PLAN=twin run 250 chk-topk-twin $CK --ops topk_indices ) &
( DSV4_TOPK_FAST_CUTS=63 DSV4_TOPK_LEAN_CUTS=15 run 250 chk-topk-cuts $CK --ops topk_indices ) &
( DSV4_TOPK_LONG_PLAN=twin run 250 test-twin python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk_twin.py ) &
( DSV4_TOPK_LONG_PLAN=wide16 run 250 test-wide16plan python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk_twin.py ) &
( run 250 test-s11b python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk_s11b.py ) &
( run 250 test-gpu python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_topk.py tests/test_cuda_topk_lean.py tests/test_cuda_attention_merge.py ) &
wait
for f in $OUT/test-*.log; do echo "## $(basename $f)"; grep -E "^FAILED|^ERROR|passed|failed" $f | tail -4; done
grep -E "^FAILED|^ERROR|passed|failed" $OUT/test-gpu.log | tail -4
B="python3 -m harness bench --device cuda --reps 10"
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 200 bench-attn $B --backend cuda,flashmla --ops sparse_attention --cases $AC --out $OUT/attn.json
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 150 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $OUT/topk.json
L=b64-262144,b64-mixed-to-262144,b64-mixed-to-262144-k1024
S=b64-16384,b1-65536,b1-65536-k1024,b256-16384
DSV4_TOPK_LONG_PLAN=twin run 100 bench-topk-twin $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $L --out $OUT/topk-twin.json
DSV4_TOPK_FAST_CUTS=63 DSV4_TOPK_LEAN_CUTS=15 DSV4_TOPK_EARLY=1 run 100 bench-topk-cuts-early $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $S --out $OUT/topk-cuts-early.json
DSV4_TOPK_FAST_CUTS=63 DSV4_TOPK_LEAN_CUTS=15 run 100 bench-topk-cuts $B --reps 15 --backend cuda --ops topk_indices --cases $S --out $OUT/topk-cuts.json
A5=decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,prefill-4096-h64-k640,prefill-4096-h128-k1152
DSV4_ATTENTION_WS_FLAGS=smem DSV4_ATTENTION_WS_SOFTMAX=ffma DSV4_ATTENTION_PERSISTENT=1 run 150 bench-attn-all $B --backend cuda,flashmla --ops sparse_attention --cases $A5 --out $OUT/attn-all.json
DSV4_ATTENTION_PERSISTENT=1 run 100 bench-attn-persistent $B --backend cuda --ops sparse_attention --cases decode-b256-h64-k640,prefill-4096-h64-k640 --out $OUT/attn-persistent.json
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
python3 - <<'PY'
import json, glob, os
rows = {}
for f in sorted(glob.glob(os.environ["OUT"] + "/*.json")):
    tag = os.path.basename(f)[:-5]
    for r in json.load(open(f))["records"]:
        t = r.get("timing") or {}
        rows.setdefault((r["op"][:4], r["case"]), {})[f"{tag}:{r['backend'][:4]}"] = (t.get("median_us", 0), r.get("verdict"), (t.get("clock") or "")[:10])
for (op, case), v in rows.items():
    print(f"{op} {case:28s} " + "  ".join(f"{k}={m:.1f}{'g' if c == 'cuda-graph' else ''}{'' if vd == 'pass' else '!' + str(vd)}" for k, (m, vd, c) in v.items()))
PY
