#!/usr/bin/env bash
# Session 17, call 5 ($1 = commit + working tree: DSV4_TOPK_WIDE_FLOOR on by default): the floor's GPU tests (bitwise
# the build without it), every top-k bench case beside SGLang, check --full of top-k, the A/B without the floor, the
# mixed batch traced under it
source "$(dirname "$0")/device_call.sh"
run 120 gpu-floor python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/test_cuda_topk_floor.py tests/test_cuda_topk_trace.py
tail -n 3 $LOGS/gpu-floor.log
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 220 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
bench_table $LOGS/bench-topk.json
run 60 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 60 ab-0 env DSV4_TOPK_WIDE_FLOOR=0 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases b64-65536,b64-262144,b64-mixed-to-262144,b64-mixed-to-262144-k1024,b1-65536 --out $LOGS/ab-0.json
bench_table $LOGS/ab-0.json
