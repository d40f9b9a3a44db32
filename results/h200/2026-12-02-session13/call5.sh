#!/usr/bin/env bash
# Session 13, call 5 ($1 = commit: LEAN_CUTS 12 by default on top of call 4's defaults): top-k check --full, the lean
# and s11b GPU tests (the default build against lean<8>, the model, and LEAN_CUTS 15 / FAST_CUTS 63), and the #13
# cases in one bench run beside SGLang.
source "$(dirname "$0")/device_call.sh"
run 60 chk-cuda-topk python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
B="python3 -m harness bench --device cuda"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 110 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
run 60 gpu-topk python3 -m pytest -q -m gpu tests/test_cuda_topk_lean.py tests/test_cuda_topk_s11b.py
bench_table $LOGS/*.json
