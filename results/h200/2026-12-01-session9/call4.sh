#!/usr/bin/env bash
# Session 9, call 4: the submitted tree (call 3's plus FAST_CUTS=1 by default and the slot test's fix): cuda top-k check --full, the top-k GPU tests, and the #13 cases beside SGLang.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
run 40 check-cuda-topk python3 -m harness check --backend cuda --device cuda --ops topk_indices --full
run 120 test-gpu python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk.py
grep -E "^FAILED|^ERROR|^E  " $OUT/test-gpu.log | head -12
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024
run 150 bench-topk python3 -m harness bench --backend cuda,sglang --ops topk_indices --device cuda --reps 15 --cases $TK --out $OUT/bench-topk.json
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
for f in $OUT/*.json; do echo "## $(basename $f)"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['records']:
    t=r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {t.get('median_us',0):8.1f} {t.get('clock','')} {r.get('extra',{}).get('events_median_us') or ''}\")
" $f; done
