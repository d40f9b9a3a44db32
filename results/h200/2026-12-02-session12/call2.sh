#!/usr/bin/env bash
# Session 12, call 2 ($1 = commit, the submitted kernels: DSV4_TOPK_TWIN=auto by default): top-k check --full, the
# #13 cases beside SGLang and the #15 cases beside FlashMLA in one bench run each; the producer's indices ahead
# (DSV4_ATTENTION_PRODUCER=ahead) beside FlashMLA in a second attention run; twin<4> forced at 64 x 262144 (the A/B);
# the graph-replay kernel times at 1 x 65536 and 64 x 16384, ours and SGLang's.
source "$(dirname "$0")/device_call.sh"
run 200 chk-cuda-topk python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
B="python3 -m harness bench --device cuda"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 150 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
DSV4_TOPK_TWIN=4 run 60 bench-topk-twin4 $B --reps 15 --backend cuda --ops topk_indices --cases b64-262144 --out $LOGS/bench-topk-twin4.json
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 160 bench-attn $B --reps 10 --backend cuda,flashmla --ops sparse_attention --cases $AC --out $LOGS/bench-attn.json
DSV4_ATTENTION_PRODUCER=ahead run 160 bench-attn-ahead $B --reps 10 --backend cuda,flashmla --ops sparse_attention --cases $AC --out $LOGS/bench-attn-ahead.json
GK="python3 ../graph_kernels.py"
run 60 graph-topk-ours $GK cuda topk_indices b1-65536 b64-16384
run 60 graph-topk-sgl $GK sglang topk_indices b1-65536 b64-16384
grep -v Warning $LOGS/graph-topk-*.log | head -24
bench_table $LOGS/*.json
