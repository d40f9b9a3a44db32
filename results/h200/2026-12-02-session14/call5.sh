#!/usr/bin/env bash
# Session 14, call 5 ($1 = commit: main with every session-14 branch merged, top-k defaults FAST_CUTS 511 + HALF_CUTS
# 1): top-k check --full and the #13 bench beside SGLang at the defaults; the attention forms (PRODUCER=lean,
# WS_OUT=tma, P_STORE=stmatrix, QO_POLICY=first, ORDER=rows): check --full under all five, prefill A/Bs, the #15
# cases beside FlashMLA at the default and under all five; then the GPU tests of the new attention forms.
source "$(dirname "$0")/device_call.sh"
run 60 chk-topk python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
B="python3 -m harness bench --device cuda"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 120 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
ALL="DSV4_ATTENTION_PRODUCER=lean DSV4_ATTENTION_WS_OUT=tma DSV4_ATTENTION_P_STORE=stmatrix DSV4_ATTENTION_QO_POLICY=first DSV4_ATTENTION_ORDER=rows"
run 90 chk-attn-all env $ALL python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention sparse_attention_fp8
A="$B --ops sparse_attention --reps 10"
P=prefill-4096-h64-k640,prefill-4096-h128-k1152
run 60 bench-attn-default $A --backend cuda,flashmla --cases $P --out $LOGS/bench-attn-default.json
run 30 bench-attn-lean-tma env DSV4_ATTENTION_PRODUCER=lean DSV4_ATTENTION_WS_OUT=tma $A --backend cuda --cases $P --out $LOGS/bench-attn-lean-tma.json
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 150 bench-attn-all env $ALL $A --backend cuda,flashmla --cases $AC --out $LOGS/bench-attn-all.json
bench_table $LOGS/*.json
run 110 gpu-tests python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu tests/test_cuda_attention_s14a.py tests/test_cuda_attention_s14b.py tests/test_cuda_attention_s14c.py tests/test_cuda_attention_s14d.py tests/test_attention_q_tma.py
