#!/usr/bin/env bash
# Session 22, call 7 ($1 = the commit): lean_regs<8, 2>'s phases at 1 x 65536 k512 / k1024 (lean_trace.py, the trace
# build); on an H200 then #13's twelve cases beside SGLang, check --full of top-k for CUDA (Triton's took >150 s on the H100 for 19 of 43 cases: left out for the device time left)
source "$(dirname "$0")/device_call.sh"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
DSV4_TOPK_TRACE=1 run 90 lean-trace python3 ../lean_trace.py
cat $LOGS/lean-trace.log
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
if [[ "$GPU" == *H200* ]]; then
  run 100 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_plans.py -k "short or plan"
  run 200 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
  cp $LOGS/bench-topk.json $OUT/
  run 80 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
  bench_table $LOGS/bench-topk.json
fi
