#!/usr/bin/env bash
# Session 20, call 4 ($1 = the commit): the short plan's copy kernel and DSV4_TOPK_MIN_ROW_CTAS=4: GPU tests, then
# A/B benches alternately (the first of each beside SGLang), then the mixed batch's trace at 4
source "$(dirname "$0")/device_call.sh"
S=b64-short,b64-short-k1024
M=b64-mixed-to-262144,b64-mixed-to-262144-k1024
run 150 gpu-tests python3 -m pytest -q tests/test_cuda_topk.py -k "short or plan_gives or rows_sized or slots"
run 150 gpu-tests-min4 env DSV4_TOPK_MIN_ROW_CTAS=4 python3 -m pytest -q tests/test_cuda_topk.py -k "plan_gives or rows_sized_by_length_on"
run 200 bench-short1-a python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $S --out $LOGS/bench-short1-a.json
run 100 bench-short0-a env DSV4_TOPK_SHORT=0 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $S --out $LOGS/bench-short0-a.json
run 100 bench-short1-b python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $S --out $LOGS/bench-short1-b.json
run 100 bench-short0-b env DSV4_TOPK_SHORT=0 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $S --out $LOGS/bench-short0-b.json
run 200 bench-min4-a env DSV4_TOPK_MIN_ROW_CTAS=4 python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $M --out $LOGS/bench-min4-a.json
run 100 bench-min2-a python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-min2-a.json
run 100 bench-min4-b env DSV4_TOPK_MIN_ROW_CTAS=4 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-min4-b.json
run 100 bench-min2-b python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-min2-b.json
run 90 trace-min4 env DSV4_TOPK_MIN_ROW_CTAS=4 DSV4_TOPK_TRACE=1 python3 -m kernels_cuda.topk_trace --reps 7 --out $LOGS/trace-min4.json
run 90 trace-min2 env DSV4_TOPK_TRACE=1 python3 -m kernels_cuda.topk_trace --reps 7 --out $LOGS/trace-min2.json
head -n 1 $LOGS/trace-min*.log
bench_table $LOGS/bench-*.json
