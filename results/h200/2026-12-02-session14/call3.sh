#!/usr/bin/env bash
# Session 14, call 3 ($1 = commit: main with topk-s14a/b and attn-s14a/b merged, every new form opt-in): the new
# top-k forms' GPU tests (bitwise the default build), check --full under all of them, and benches beside SGLang:
# the default against all four switches (FAST_CUTS 511, HALF_CUTS 1, WIDE_WINDOW 1, WIDE_TABLE 1), and the mixed
# batch under WIDE_WINDOW and WIDE_TABLE alone.
source "$(dirname "$0")/device_call.sh"
ALL="DSV4_TOPK_FAST_CUTS=511 DSV4_TOPK_HALF_CUTS=1 DSV4_TOPK_WIDE_WINDOW=1 DSV4_TOPK_WIDE_TABLE=1"
run 60 chk-topk-all env $ALL python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
B="python3 -m harness bench --device cuda --ops topk_indices"
TK=b64-short,b256-16384,b256-16384-k1024,b64-16384,b64-mixed-to-262144,b64-mixed-to-262144-k1024,b64-65536
run 90 bench-default $B --reps 15 --backend cuda,sglang --cases $TK --out $LOGS/bench-default.json
run 60 bench-all env $ALL $B --reps 15 --backend cuda --cases $TK --out $LOGS/bench-all.json
MX=b64-mixed-to-262144,b64-mixed-to-262144-k1024
run 40 bench-window env DSV4_TOPK_WIDE_WINDOW=1 $B --reps 15 --backend cuda --cases $MX --out $LOGS/bench-window.json
run 40 bench-table env DSV4_TOPK_WIDE_TABLE=1 $B --reps 15 --backend cuda --cases $MX --out $LOGS/bench-table.json
run 90 bench-all-2 env $ALL $B --reps 15 --backend cuda,sglang --cases $TK --out $LOGS/bench-all-2.json
run 240 gpu-tests python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu tests/test_cuda_topk_fast.py tests/test_cuda_topk_s14b.py
bench_table $LOGS/*.json
