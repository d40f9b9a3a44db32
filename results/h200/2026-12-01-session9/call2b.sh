#!/usr/bin/env bash
# Session 9, call 2b: the ws attention kernel's final draft (attn-s9 at 5492fd9, merged onto main): check --full, bench beside FlashMLA, ncu of prefill H64 and decode b64 H64.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
export DSV4_ATTENTION_KERNEL=ws
run 120 check-attn-ws python3 -m harness check --backend cuda --device cuda --ops sparse_attention --full
run 60 test-ws-gpu python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_attention_ws.py tests/test_cuda_loader.py -k "attention or ws"
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 150 bench-attn-ws python3 -m harness bench --backend cuda,flashmla --ops sparse_attention --device cuda --reps 10 --cases $AC --out $OUT/a-ws.json
run 120 ncu-ws ncu --kernel-name regex:dsv4_sparse_attention_ws --launch-skip 2 --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis python3 ../ncu_op.py sparse_attention prefill-4096-h64-k640 decode-b64-h64-k640
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Achieved Occ|Stall" $OUT/ncu-ws.log | head -40
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
for f in $OUT/*.json; do echo "## $(basename $f)"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['records']:
    t=r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {t.get('median_us',0):8.1f} {t.get('clock','')} {r.get('extra',{}).get('events_median_us') or ''}\")
" $f; done
