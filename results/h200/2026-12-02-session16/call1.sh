#!/usr/bin/env bash
# Session 16, call 1 ($1 = commit): #13's mixed batch under DSV4_TOPK_MIXED=half / half-prefetch beside SGLang, the
# default twice (spread); then the s15a GPU tests and check --full under the switch.
source "$(dirname "$0")/device_call.sh"
python3 -c "import kernels_cuda.topk_indices as T; print('mixed_active', T._mixed_active(0))" 2>&1 | tail -1
B="python3 -m harness bench --device cuda --ops topk_indices --backend cuda,sglang --reps 15 --cases b64-mixed-to-262144,b64-mixed-to-262144-k1024"
run 130 bench-default $B --out $LOGS/default.json
DSV4_TOPK_MIXED=half run 70 bench-half $B --out $LOGS/half.json
DSV4_TOPK_MIXED=half-prefetch run 70 bench-halfpf $B --out $LOGS/halfpf.json
run 70 bench-default2 $B --out $LOGS/default2.json
bench_table $LOGS/default.json $LOGS/half.json $LOGS/halfpf.json $LOGS/default2.json
run 150 gpu-tests python3 -m pytest -q -rf -p no:cacheprovider -n 8 -m gpu tests/test_cuda_topk_s15a.py
tail -n 5 $LOGS/gpu-tests.log
DSV4_TOPK_MIXED=half run 60 chk-half python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
