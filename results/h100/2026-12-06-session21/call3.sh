#!/usr/bin/env bash
# Session 21, call 3 ($1 = the commit): the short plan's copy: its GPU tests and check --full of top-k (CUDA); the
# short batches with the copy (default) and without (DSV4_TOPK_SHORT=0: the shape's kernel), three alternating pairs
# beside SGLang; #13's twelve cases beside SGLang at the commit
source "$(dirname "$0")/device_call.sh"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
S=b64-short,b64-short-k1024
run 100 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py -k short
run 60 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
for i in 1 2 3; do
  run 40 short-copy-$i python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $S --out $LOGS/short-copy-$i.json
  run 40 short-kernel-$i env DSV4_TOPK_SHORT=0 python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $S --out $LOGS/short-kernel-$i.json
done
run 150 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
cp $LOGS/bench-topk.json $OUT/
bench_table $LOGS/short-*.json $LOGS/bench-topk.json
