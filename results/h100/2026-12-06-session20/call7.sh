#!/usr/bin/env bash
# Session 20, call 7 ($1 = the commit): #13's twelve cases beside SGLang at the commit's build (MIN_ROW_CTAS 4 and
# WIDE_WINDOW 1 by default), check --full of top-k (CUDA), the window's bitwise GPU tests on the mixed batch, then the
# other top-k GPU tests
source "$(dirname "$0")/device_call.sh"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 150 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
cp $LOGS/bench-topk.json $OUT/
run 60 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 120 s14b-mixed python3 -m pytest -q -m gpu tests/test_cuda_topk_s14b.py -k mixed
run 120 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_cuda_loader.py -k topk
bench_table $LOGS/bench-topk.json
