#!/usr/bin/env bash
# Session 13, call 1 ($1 = commit: main 4bfb3b5 + branches topk-s13a and attn-s13a merged, every new form opt-in):
# the GPU tests at the default (the loader's max_active_clusters, 06d44ee) and under twin<2>'s one-walk forms and
# Q by TMA; top-k check --full; top-k benches (default beside SGLang; onewalk / onewalk8; EARLY); attention bench
# (default beside FlashMLA; Q by TMA).
source "$(dirname "$0")/device_call.sh"
run 150 gpu-topk-default python3 -m pytest -q -m gpu tests/test_cuda_topk_twin.py tests/test_cuda_loader.py tests/test_cuda_topk_lean.py
DSV4_TOPK_TWIN_FORM=onewalk run 90 gpu-topk-onewalk python3 -m pytest -q -m gpu tests/test_cuda_topk_twin.py
DSV4_TOPK_TWIN_FORM=onewalk8 run 90 gpu-topk-onewalk8 python3 -m pytest -q -m gpu tests/test_cuda_topk_twin.py
run 150 gpu-attn-qtma python3 -m pytest -q -m gpu --full tests/test_attention_q_tma.py
run 60 chk-cuda-topk python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
B="python3 -m harness bench --device cuda"
TK=b64-262144,b64-mixed-to-262144,b1-65536,b1-65536-k1024,b64-65536,b64-16384
run 90 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
TW=b64-262144,b64-mixed-to-262144
DSV4_TOPK_TWIN_FORM=onewalk run 45 bench-topk-onewalk $B --reps 15 --backend cuda --ops topk_indices --cases $TW --out $LOGS/bench-topk-onewalk.json
DSV4_TOPK_TWIN_FORM=onewalk8 run 45 bench-topk-onewalk8 $B --reps 15 --backend cuda --ops topk_indices --cases $TW --out $LOGS/bench-topk-onewalk8.json
DSV4_TOPK_EARLY=1 run 60 bench-topk-early $B --reps 15 --backend cuda --ops topk_indices --cases b1-65536,b1-65536-k1024,b64-65536,b64-16384 --out $LOGS/bench-topk-early.json
AC=decode-b64-h64-k640,decode-b64-h128-k1152,prefill-4096-h64-k640,decode-b256-h64-k640
run 100 bench-attn $B --reps 10 --backend cuda,flashmla --ops sparse_attention --cases $AC --out $LOGS/bench-attn.json
grep -q " passed" $LOGS/gpu-attn-qtma.log && ! grep -q "failed\|error" $LOGS/gpu-attn-qtma.log && \
  DSV4_ATTENTION_Q=tma run 80 bench-attn-qtma $B --reps 10 --backend cuda --ops sparse_attention --cases $AC --out $LOGS/bench-attn-qtma.json
bench_table $LOGS/*.json
