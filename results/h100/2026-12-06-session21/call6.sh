#!/usr/bin/env bash
# Session 21, call 6 ($1 = the commit: the short plan made on the device): the top-k plan and short GPU tests, check
# --full of top-k (CUDA), #13's twelve cases beside SGLang
source "$(dirname "$0")/device_call.sh"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 100 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_plans.py -k "short or plan"
run 60 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 200 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
cp $LOGS/bench-topk.json $OUT/
bench_table $LOGS/bench-topk.json
