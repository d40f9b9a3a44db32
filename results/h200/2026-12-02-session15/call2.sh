#!/usr/bin/env bash
# Session 15, call 2 ($1 = commit: WS_OUT=tma and ORDER=rows the attention defaults): check --full (cuda attention,
# FP8, top-k) and the #15 and #13 cases beside FlashMLA and SGLang at the defaults; then the attention GPU tests.
source "$(dirname "$0")/device_call.sh"
run 80 chk-attn python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention sparse_attention_fp8
B="python3 -m harness bench --device cuda"
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 160 bench-attn $B --ops sparse_attention --reps 10 --backend cuda,flashmla --cases $AC --out $LOGS/bench-attn.json
bench_table $LOGS/bench-attn.json
run 40 chk-topk python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 170 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
bench_table $LOGS/bench-topk.json
