#!/usr/bin/env bash
# Session 20, call 1 ($1 = the commit): DSV4_TOPK_GATE's GPU tests, then the mixed cases gate off / on alternately
# (the first pair beside SGLang), then the trace of the mixed batch gate off / on
source "$(dirname "$0")/device_call.sh"
M=b64-mixed-to-262144,b64-mixed-to-262144-k1024
run 150 gpu-tests python3 -m pytest -q -x tests/test_cuda_topk.py -k "gate or plan_gives"
run 200 bench-g0-a env DSV4_TOPK_GATE=0 python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $M --out $LOGS/bench-g0-a.json
run 100 bench-g1-a env DSV4_TOPK_GATE=1 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-g1-a.json
run 100 bench-g0-b env DSV4_TOPK_GATE=0 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-g0-b.json
run 100 bench-g1-b env DSV4_TOPK_GATE=1 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-g1-b.json
run 100 bench-g1c-a env DSV4_TOPK_GATE=1 DSV4_TOPK_GATE_COLUMNS=1 python3 -m harness bench --device cuda --reps 15 --backend cuda --ops topk_indices --cases $M --out $LOGS/bench-g1c-a.json
for g in 0 1; do run 90 trace-g$g env DSV4_TOPK_GATE=$g DSV4_TOPK_TRACE=1 python3 -m kernels_cuda.topk_trace --reps 5 --out $LOGS/trace-g$g.json; done
tail -n 30 $LOGS/trace-g0.log $LOGS/trace-g1.log
bench_table $LOGS/bench-*.json
