#!/usr/bin/env bash
# Session 22, call 1 ($1 = the commit): the top-k plan/short GPU tests at the head, check --full of top-k (CUDA),
# #13's twelve cases beside SGLang
source "$(dirname "$0")/device_call.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 120 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_plans.py -k "short or plan"
run 200 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
cp $LOGS/bench-topk.json $OUT/
run 80 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 150 chk-triton python3 -m harness check --backend triton --device cuda --full --ops topk_indices
bench_table $LOGS/bench-topk.json
