#!/usr/bin/env bash
# Session 21, call 1 ($1 = the commit): #13's twelve cases beside SGLang at the commit (WIDE_WINDOW 1 by default),
# check --full of top-k (CUDA), the window's bitwise GPU tests (tests/test_cuda_topk_s14b.py), the other top-k GPU
# tests, the wide<2> / mixed cases with the window off and on, the short batch with fast<1> launched with and without PDL (two alternating pairs), check --full of top-k
# (Triton)
source "$(dirname "$0")/device_call.sh"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
S=b64-short,b64-short-k1024
run 150 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
cp $LOGS/bench-topk.json $OUT/
run 60 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 150 s14b python3 -m pytest -q -m gpu tests/test_cuda_topk_s14b.py
run 100 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_cuda_loader.py -k topk
W=b64-65536,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144,b64-mixed-to-262144-k1024
run 60 window-off env DSV4_TOPK_WIDE_WINDOW=0 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $W --out $LOGS/window-off.json
run 60 window-on python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $W --out $LOGS/window-on.json
for i in 1 2; do
  run 40 short-pdl-$i python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $S --out $LOGS/short-pdl-$i.json
  run 40 short-nopdl-$i python3 ../nopdl.py bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $S --out $LOGS/short-nopdl-$i.json
done
run 100 chk-triton python3 -m harness check --backend triton --device cuda --full --ops topk_indices
bench_table $LOGS/bench-topk.json $LOGS/window-*.json $LOGS/short-*.json
