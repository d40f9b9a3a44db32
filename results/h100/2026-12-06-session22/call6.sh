#!/usr/bin/env bash
# Session 22, call 6 ($1 = the commit: HALF_CUTS 3 by default): the top-k GPU tests, #13's twelve cases beside
# SGLang, check --full of top-k (CUDA; Triton too on an H200, the issue's card)
source "$(dirname "$0")/device_call.sh"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 100 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_plans.py -k "short or plan or half"
run 200 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
cp $LOGS/bench-topk.json $OUT/
run 80 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
[[ "$GPU" == *H200* ]] && run 420 chk-triton python3 -m harness check --backend triton --device cuda --full --ops topk_indices
bench_table $LOGS/bench-topk.json
