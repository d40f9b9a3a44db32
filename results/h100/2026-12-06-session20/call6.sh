#!/usr/bin/env bash
# Session 20, call 6 ($1 = the commit): the wide16 test on its new lengths, check --full of top-k (CUDA) under
# DSV4_TOPK_WIDE_WINDOW=1, and the mixed cases with and without it beside SGLang
source "$(dirname "$0")/device_call.sh"
M=b64-mixed-to-262144,b64-mixed-to-262144-k1024
run 120 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py -k "wide16 or rows_sized or plan_gives"
run 120 chk-cuda-window env DSV4_TOPK_WIDE_WINDOW=1 python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 100 bench-window env DSV4_TOPK_WIDE_WINDOW=1 python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $M --out $LOGS/bench-window.json
run 100 bench-default python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-default.json
bench_table $LOGS/bench-*.json
