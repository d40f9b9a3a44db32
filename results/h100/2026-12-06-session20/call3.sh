#!/usr/bin/env bash
# Session 20, call 3 ($1 = main's commit): #13's twelve cases beside SGLang at main's build; the mixed batch under
# other groups' bounds (cuda only)
source "$(dirname "$0")/device_call.sh"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
M=b64-mixed-to-262144,b64-mixed-to-262144-k1024
run 300 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
for b in 16384 20480 24576 36864 0; do run 100 bench-bound$b env DSV4_TOPK_GROUPS_BOUND=$b python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-bound$b.json; done
run 100 bench-groups0 env DSV4_TOPK_GROUPS=0 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-groups0.json
bench_table $LOGS/bench-*.json
