#!/usr/bin/env bash
# Session 12, call 0 ($1 = commit): the GPU tests session 11 could not rerun (top-k s11b, twin, merge) and cuda
# check --full of attention after 8d95f52's host change; then ncu diagnostics: twin<4> at 64x262144 (residency,
# the filter's re-reads: memory workload), the 1x65536 kernel, the ws attention kernel at b64 H64 and prefill
# H64 under the session-11 defaults, and SGLang's kernels at the two top-k cases for the same sections.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
CK="python3 -m harness check --backend cuda --device cuda --full"
( run 200 chk-cuda-attn $CK --ops sparse_attention ) &
( run 200 test-gpu python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_topk.py tests/test_cuda_topk_lean.py tests/test_cuda_topk_twin.py tests/test_cuda_topk_s11b.py tests/test_cuda_attention_merge.py ) &
wait
grep -E "^FAILED|^ERROR|passed|failed" $OUT/test-gpu.log | tail -6
NCU="ncu --clock-control none"
SECS="--section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
src() {  # name kernel-regex skip backend op case: one launch with source counters, then its SASS page
  local name=$1 k=$2 skip=$3; shift 3
  run 100 $name $NCU --kernel-name regex:$k --launch-skip $skip --launch-count 1 $SECS -o /tmp/$name python3 ../ncu_any.py "$@"
  timeout 60 ncu -i /tmp/$name.ncu-rep --page source --csv --print-source sass > $OUT/$name.sass.csv 2>&1 || echo "source page failed rc=$?"
  timeout 30 ncu -i /tmp/$name.ncu-rep --page details >> $OUT/$name.log 2>&1
}
src ncu-topk-twin dsv4_topk 2 cuda topk_indices b64-262144
src ncu-topk-b1 dsv4_topk 2 cuda topk_indices b1-65536
src ncu-attn-b64 dsv4_sparse_attention_ws 2 cuda sparse_attention decode-b64-h64-k640
src ncu-attn-prefill dsv4_sparse_attention_ws 2 cuda sparse_attention prefill-4096-h64-k640
run 120 ncu-dur-topk-sgl $NCU --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis python3 ../ncu_any.py sglang topk_indices b64-262144 b1-65536 b64-16384
run 120 ncu-dur-topk-ours $NCU --section SpeedOfLight --section LaunchStats --section MemoryWorkloadAnalysis python3 ../ncu_any.py cuda topk_indices b64-262144 b1-65536 b64-16384
for f in $OUT/ncu-*.log; do echo "## $f"; grep -E "^  [a-zA-Z_].*\(|Duration|Grid Size|Block Size|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Memory Throughput|L2 Hit Rate|Cluster Size|Waves Per SM" $f | head -80; done > $OUT/summary.txt
cd $OUT && tar czf logs.tgz *.log *.csv && rm -f *.log *.csv
head -c 9000 summary.txt
