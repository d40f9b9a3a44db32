#!/usr/bin/env bash
# Session 11, call 0 ($1 = commit): the new split combine kernel. cuda check --full of both attention ops, the decode
# cases beside FlashMLA, forced splits 1 / 2, and every kernel's duration under ncu at decode b64 H64 (2 splits).
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
CK="python3 -m harness check --backend cuda --device cuda --full"
( run 200 chk-cuda-attn $CK --ops sparse_attention ) &
( run 200 chk-cuda-fp8 $CK --ops sparse_attention_fp8 ) &
wait
B="python3 -m harness bench --device cuda"
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320
run 150 bench-attn $B --reps 10 --backend cuda,flashmla --ops sparse_attention --cases $AC --out $OUT/bench-attn.json
for s in 1 2; do
  DSV4_ATTENTION_SPLITS=$s run 90 bench-split$s $B --backend cuda --ops sparse_attention --reps 10 --cases decode-b64-h64-k640,decode-b64-h128-k1152 --out $OUT/split$s.json
done
# ../ncu_any.py: results/h200/2026-12-01-session10/ncu_any.py
run 120 ncu-dur-attn-ours ncu --clock-control none --section SpeedOfLight --section LaunchStats python3 ../ncu_any.py cuda sparse_attention decode-b64-h64-k640
grep -E "^  [a-z_].*\(|Duration|Grid Size|Block Size" $OUT/ncu-dur-attn-ours.log | head -40 > $OUT/durations.txt
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
cat durations.txt
for f in $OUT/*.json; do echo "## $(basename $f)"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['records']:
    t=r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {t.get('median_us',0):8.1f} {t.get('clock','')[:10]} {r.get('extra',{}).get('events_median_us') or ''} {r.get('pct_copy') or 0:.1f}%\")
" $f; done
