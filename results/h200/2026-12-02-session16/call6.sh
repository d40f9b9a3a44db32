#!/usr/bin/env bash
# Session 16, call 6 ($1 = commit: DSV4_TOPK_MIXED removed, the default top-k build as before): check --full of
# top-k for both backends, every top-k bench case beside SGLang, then the attention GPU tests of session 15's defaults
source "$(dirname "$0")/device_call.sh"
run 60 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 200 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
bench_table $LOGS/bench-topk.json
run 150 chk-triton python3 -m harness check --backend triton --device cuda --full --ops topk_indices
run 150 gpu-attn python3 -m pytest -q -rf -p no:cacheprovider -n 16 -m gpu tests/test_cuda_attention_s14c.py tests/test_cuda_attention_s14b.py tests/test_attention_q_tma.py
tail -n 6 $LOGS/gpu-attn.log
