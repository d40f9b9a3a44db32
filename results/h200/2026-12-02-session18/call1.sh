#!/usr/bin/env bash
# Session 18, call 1 ($1 = commit): DSV4_TOPK_WIDE_BULK A/B (cuda only, the cases it touches), the mixed batch traced
# under each, the bulk form's GPU tests (bitwise the build without it)
source "$(dirname "$0")/device_call.sh"
run 60 fill python3 ../probe_fill.py 32768
tail -n 10 $LOGS/fill.log
AB=b64-mixed-to-262144,b64-mixed-to-262144-k1024,b64-65536,b1-65536,b64-262144
for v in 1 0; do
  run 90 ab-$v env DSV4_TOPK_WIDE_BULK=$v python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $AB --out $LOGS/ab-$v.json
  bench_table $LOGS/ab-$v.json
done
for v in 0 1; do
  run 60 trace-$v env DSV4_TOPK_WIDE_BULK=$v DSV4_TOPK_TRACE=1 python3 -m kernels_cuda.topk_trace --case b64-mixed-to-262144 --out $LOGS/trace-$v.json
  tail -n 14 $LOGS/trace-$v.log
done
run 60 warm-1 env DSV4_TOPK_WIDE_BULK=1 DSV4_TOPK_TRACE=1 python3 ../probe_warm.py $LOGS
tail -n 12 $LOGS/warm-1.log
run 200 gpu-bulk python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/test_cuda_topk_s18a.py
tail -n 3 $LOGS/gpu-bulk.log
