#!/usr/bin/env bash
# Session 18, call 8 ($1 = main's commit): #13's run: every top-k bench case beside SGLang at main's build, then
# check --full of top-k for CUDA and Triton
source "$(dirname "$0")/device_call.sh"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 240 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
bench_table $LOGS/bench-topk.json
cp $LOGS/bench-topk.json $OUT/ 2>/dev/null
run 90 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 150 chk-triton python3 -m harness check --backend triton --device cuda --full --ops topk_indices
