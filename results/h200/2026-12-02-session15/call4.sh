#!/usr/bin/env bash
# Session 15, call 4 ($1 = commit: attention defaults WS_OUT=tma, ORDER=rows, P_STORE=stmatrix, QO_POLICY=first):
# check --full and every #15 case beside FlashMLA; then the GPU tests of the new defaults' switches.
source "$(dirname "$0")/device_call.sh"
run 60 chk-attn python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention sparse_attention_fp8
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 160 bench-attn python3 -m harness bench --device cuda --ops sparse_attention --reps 10 --backend cuda,flashmla --cases $AC --out $LOGS/bench-attn.json
bench_table $LOGS/bench-attn.json
run 130 gpu-tests python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu tests/test_cuda_attention_s14c.py tests/test_cuda_attention_s14b.py tests/test_attention_q_tma.py
tail -n 3 $LOGS/gpu-tests.log
