#!/usr/bin/env bash
# Session 10, call 1 (main 7a11cec): diagnostics. ncu SASS-level stall sampling of the ws attention kernel
# (decode b64 H64 / H128, prefill H64) and the top-k kernels (1x65536, 64x16384, 64x262144); the peers'
# kernel durations at the same cases; the decode split-K A/B.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; tail -n 2 $OUT/$name.log; }
NCU="ncu --clock-control none"
src() {  # name kernel-regex skip backend op case: one launch with source counters, then its SASS page
  local name=$1 k=$2 skip=$3; shift 3
  run 100 $name $NCU --kernel-name regex:$k --launch-skip $skip --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats --section Occupancy -o /tmp/$name python3 ../ncu_any.py "$@"
  timeout 60 ncu -i /tmp/$name.ncu-rep --page source --csv --print-source sass > $OUT/$name.sass.csv 2>&1 || echo "source page failed rc=$?"
  timeout 30 ncu -i /tmp/$name.ncu-rep --page details >> $OUT/$name.log 2>&1
}
src ncu-attn-b64 dsv4_sparse_attention_ws 2 cuda sparse_attention decode-b64-h64-k640
src ncu-attn-b64h128 dsv4_sparse_attention_ws 2 cuda sparse_attention decode-b64-h128-k1152
src ncu-attn-prefill dsv4_sparse_attention_ws 2 cuda sparse_attention prefill-4096-h64-k640
src ncu-topk-b1 dsv4_topk 2 cuda topk_indices b1-65536
src ncu-topk-b64 dsv4_topk 2 cuda topk_indices b64-16384
src ncu-topk-b64l dsv4_topk 2 cuda topk_indices b64-262144
# every kernel's duration, ours and the peers' (the third call of each case)
run 120 ncu-dur-attn $NCU --section SpeedOfLight --section LaunchStats python3 ../ncu_any.py flashmla sparse_attention decode-b64-h64-k640 decode-b64-h128-k1152 decode-b8-h64-k640
run 120 ncu-dur-attn-ours $NCU --section SpeedOfLight --section LaunchStats python3 ../ncu_any.py cuda sparse_attention decode-b64-h64-k640 decode-b8-h64-k640
run 120 ncu-dur-topk $NCU --section SpeedOfLight --section LaunchStats python3 ../ncu_any.py sglang topk_indices b1-65536 b64-16384 b64-262144
run 120 ncu-dur-topk-ours $NCU --section SpeedOfLight --section LaunchStats python3 ../ncu_any.py cuda topk_indices b1-65536 b64-16384 b64-262144
for s in 1 2 3 5; do
  DSV4_ATTENTION_SPLITS=$s run 90 bench-split$s python3 -m harness bench --backend cuda --ops sparse_attention --device cuda --reps 10 --cases decode-b64-h64-k640,decode-b64-h128-k1152,decode-b8-h64-k640 --out $OUT/split$s.json
done
for f in $OUT/ncu-dur*.log; do echo "## $f"; grep -E "^  [a-z_].*\(|Duration|Grid Size|Block Size" $f | head -60; done > $OUT/durations.txt
cd $OUT && tar czf logs.tgz *.log *.csv && rm -f *.log *.csv
cat durations.txt | head -80
for f in $OUT/*.json; do echo "## $(basename $f)"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['records']:
    t=r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {t.get('median_us',0):8.1f} {t.get('clock','')} {r.get('extra',{}).get('events_median_us') or ''}\")
" $f; done
