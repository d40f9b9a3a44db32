#!/usr/bin/env bash
# Session 13, call 4 ($1 = commit: the submitted top-k defaults, FAST_CUTS 255 and LEAN_FORM window): top-k check
# --full and the top-k GPU tests at the default; the #13 cases in one bench run beside SGLang; LEAN_CUTS 12 (the
# lean kernels' bit-mask walks and early address, never timed without the pushed sums) at 1 x 65536.
source "$(dirname "$0")/device_call.sh"
run 60 chk-cuda-topk python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
B="python3 -m harness bench --device cuda"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 120 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
DSV4_TOPK_LEAN_CUTS=12 run 60 bench-topk-lean12 $B --reps 15 --backend cuda,sglang --ops topk_indices --cases b1-65536,b1-65536-k1024 --out $LOGS/bench-topk-lean12.json
run 120 gpu-topk python3 -m pytest -q -m gpu tests/test_cuda_topk_fast.py tests/test_cuda_topk_s11b.py tests/test_cuda_topk_lean.py tests/test_cuda_topk_twin.py tests/test_cuda_topk.py -k "fast or s11b or lean or twin or early"
bench_table $LOGS/*.json
