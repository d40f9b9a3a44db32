#!/usr/bin/env bash
# Session 20, call 5 ($1 = the commit): #13's twelve cases beside SGLang at the commit's build (DSV4_TOPK_MIN_ROW_CTAS=4
# by default), check --full of top-k for CUDA and Triton, the top-k GPU tests, the mixed batch's A/B (2 CTAs at least;
# WIDE_WINDOW=1), its trace, and the twelve cases again
source "$(dirname "$0")/device_call.sh"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
M=b64-mixed-to-262144,b64-mixed-to-262144-k1024
run 300 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
cp $LOGS/bench-topk.json $OUT/
run 120 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 200 chk-triton python3 -m harness check --backend triton --device cuda --full --ops topk_indices
run 300 gpu-tests python3 -m pytest -q -m gpu -x tests/ -k topk
run 100 bench-min2 env DSV4_TOPK_MIN_ROW_CTAS=2 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-min2.json
run 100 bench-window env DSV4_TOPK_WIDE_WINDOW=1 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-window.json
run 100 bench-min4 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-min4.json
run 90 trace env DSV4_TOPK_TRACE=1 python3 -m kernels_cuda.topk_trace --reps 7 --out $LOGS/trace.json
run 300 bench-topk-2 python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk-2.json
cp $LOGS/bench-topk-2.json $OUT/
head -n 1 $LOGS/trace.log
bench_table $LOGS/bench-*.json
