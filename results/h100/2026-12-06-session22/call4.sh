#!/usr/bin/env bash
# Session 22, call 4 ($1 = the commit): on an H200 first #13's twelve cases beside SGLang (+ the plan/short GPU tests,
# check --full CUDA); then HALF_CUTS 3 (bit 2, keys counted by vector) against the default 1 on 256 x 16384 k512 /
# k1024 beside SGLang, alternating, and the half kernel's bitwise GPU test over HALF_CUTS 0 / 1 / 3
source "$(dirname "$0")/device_call.sh"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
if [[ "$GPU" == *H200* ]]; then
  run 100 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_plans.py -k "short or plan"
  run 200 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
  cp $LOGS/bench-topk.json $OUT/
  run 80 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
fi
for hc in 1 3 1 3; do
  i=$((${i:-0} + 1))
  DSV4_TOPK_HALF_CUTS=$hc run 90 ab$i-h$hc python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases b256-16384,b256-16384-k1024 --out $LOGS/ab$i-h$hc.json
done
cp $LOGS/ab*.json $OUT/ 2>/dev/null
run 200 half-tests python3 -m pytest -q -m gpu tests/test_cuda_topk_fast.py -k "half_table_cut"
[[ "$GPU" == *H200* ]] && bench_table $LOGS/bench-topk.json
bench_table $LOGS/ab*.json
