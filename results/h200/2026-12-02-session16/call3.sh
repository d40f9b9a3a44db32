#!/usr/bin/env bash
# Session 16, call 3 ($1 = commit): fill_spares (14 places) lets the half plan run: its GPU tests, the chains by class
# of rows (probe_mixed.py, default / half / half-prefetch), the two mixed cases beside SGLang (default, half)
source "$(dirname "$0")/device_call.sh"
run 100 gpu-tests python3 -m pytest -q -rf -x -p no:cacheprovider -n 8 -m gpu tests/test_cuda_topk_s15a.py
tail -n 4 $LOGS/gpu-tests.log
run 60 probe-default python3 ../probe_mixed.py
DSV4_TOPK_MIXED=half run 60 probe-half python3 ../probe_mixed.py
DSV4_TOPK_MIXED=half-prefetch run 60 probe-halfpf python3 ../probe_mixed.py
cat $LOGS/probe-*.log | grep -v Warn
B="python3 -m harness bench --device cuda --ops topk_indices --backend cuda,sglang --reps 15 --cases b64-mixed-to-262144,b64-mixed-to-262144-k1024"
run 120 bench-default $B --out $LOGS/default.json
DSV4_TOPK_MIXED=half run 70 bench-half $B --out $LOGS/half.json
bench_table $LOGS/default.json $LOGS/half.json
DSV4_TOPK_MIXED=half run 60 chk-half python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
