#!/usr/bin/env bash
# Session 11, call 2 ($1 = commit): the cluster merge of two splits (DSV4_ATTENTION_MERGE=cluster) checked and timed,
# and the gathers' L2 policy (DSV4_ATTENTION_KV_POLICY) at prefill, where neighbouring query rows share rows.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
CK="python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention"
( DSV4_ATTENTION_MERGE=cluster DSV4_ATTENTION_KV_POLICY=first run 200 chk-merge-first $CK ) &
( DSV4_ATTENTION_MERGE=cluster run 200 chk-merge $CK ) &
wait
B="python3 -m harness bench --device cuda --backend cuda --ops sparse_attention --reps 10"
DC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320
PC=prefill-4096-h64-k640,prefill-4096-h128-k1152
DSV4_ATTENTION_MERGE=cluster DSV4_ATTENTION_KV_POLICY=first run 150 bench-merge-first $B --cases $DC --out $OUT/bench-merge-first.json
DSV4_ATTENTION_MERGE=cluster run 150 bench-merge $B --cases decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,hca-decode-b64-h64-k8320 --out $OUT/bench-merge.json
DSV4_ATTENTION_KV_POLICY=first run 150 bench-first-prefill $B --cases $PC --out $OUT/bench-first-prefill.json
DSV4_ATTENTION_KV_POLICY=normal run 150 bench-normal $B --cases $PC,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152 --out $OUT/bench-normal.json
DSV4_ATTENTION_MERGE=cluster DSV4_ATTENTION_KV_POLICY=first run 100 kt-merge-first python3 ../kernel_times.py cuda sparse_attention decode-b64-h64-k640 hca-decode-b64-h64-k8320
cd $OUT && grep -E "^##|^   " kt-merge-first.log > kernel-times.txt; tar czf logs.tgz *.log && rm -f *.log
cat kernel-times.txt
for f in $OUT/*.json; do echo "## $(basename $f)"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['records']:
    t=r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {t.get('median_us',0):8.1f} {t.get('clock','')[:10]} {r.get('tflops') or 0:.0f}TF {r.get('pct_copy') or 0:.1f}%\")
" $f; done
