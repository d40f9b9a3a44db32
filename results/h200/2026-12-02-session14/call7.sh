#!/usr/bin/env bash
# Session 14, call 7 ($1 = commit: PRODUCER=lean the default, WS_OUT=tma's fix merged): the #15 cases beside FlashMLA at
# the default; check --full under WS_OUT=tma and, if it passes, its prefill A/B.
source "$(dirname "$0")/device_call.sh"
A="python3 -m harness bench --device cuda --ops sparse_attention --reps 10"
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 140 bench-attn $A --backend cuda,flashmla --cases $AC --out $LOGS/bench-attn.json
run 50 chk-tma env DSV4_ATTENTION_WS_OUT=tma python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention sparse_attention_fp8 && \
  grep -q " 0 failed" $LOGS/chk-tma.log && \
  run 40 bench-tma env DSV4_ATTENTION_WS_OUT=tma $A --backend cuda --cases prefill-4096-h64-k640,prefill-4096-h128-k1152 --out $LOGS/bench-tma.json
bench_table $LOGS/*.json
