#!/usr/bin/env bash
# Session 15, call 1 ($1 = commit): every #15 case beside FlashMLA under DSV4_ATTENTION_WS_OUT=tma (is it the
# default?); prefill H128 under tma + ORDER=rows and tma + P_STORE=stmatrix alone; the attention GPU bitwise tests;
# top-k mixed k1024 beside SGLang three times (is the gap noise?).
source "$(dirname "$0")/device_call.sh"
B="python3 -m harness bench --device cuda"
A="$B --ops sparse_attention --reps 10"
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 150 bench-attn-tma env DSV4_ATTENTION_WS_OUT=tma $A --backend cuda,flashmla --cases $AC --out $LOGS/bench-attn-tma.json
P=prefill-4096-h128-k1152
run 40 bench-tma-rows env DSV4_ATTENTION_WS_OUT=tma DSV4_ATTENTION_ORDER=rows $A --backend cuda --cases $P --out $LOGS/bench-tma-rows.json
run 40 bench-tma-stm env DSV4_ATTENTION_WS_OUT=tma DSV4_ATTENTION_P_STORE=stmatrix $A --backend cuda --cases $P --out $LOGS/bench-tma-stm.json
bench_table $LOGS/*.json
for i in 1 2 3; do
  run 50 bench-topk-mixed$i $B --reps 15 --backend cuda,sglang --ops topk_indices --cases b64-mixed-to-262144-k1024,b64-mixed-to-262144 --out $LOGS/bench-topk-mixed$i.json
done
bench_table $LOGS/bench-topk-mixed*.json
run 150 gpu-tests python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu tests/test_cuda_attention_s14a.py tests/test_cuda_attention_s14b.py tests/test_cuda_attention_s14c.py tests/test_cuda_attention_s14d.py tests/test_attention_q_tma.py
