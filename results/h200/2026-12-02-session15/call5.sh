#!/usr/bin/env bash
# Session 15, call 5 ($1 = commit: topk-s15a merged): top-k check --full under DSV4_TOPK_MIXED=half (opt-in), then
# the mixed batch under half and at the default, cuda alone (the budget's last ~2.5 minutes).
source "$(dirname "$0")/device_call.sh"
run 40 chk-half env DSV4_TOPK_MIXED=half python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
B="python3 -m harness bench --device cuda --ops topk_indices --backend cuda --reps 15 --cases b64-mixed-to-262144,b64-mixed-to-262144-k1024"
run 30 bench-half env DSV4_TOPK_MIXED=half $B --out $LOGS/bench-half.json
run 30 bench-def $B --out $LOGS/bench-def.json
bench_table $LOGS/bench-*.json
