#!/usr/bin/env bash
# Session 13, call 3 ($1 = commit: main with helpers 52-54's opt-in forms merged): their GPU tests (fast kernel's
# FAST_CUTS 255 / 127 / 191 and MATH=split bitwise against the default; lean_regs under LEAN_FORM=window against
# lean<8> and the model); check --full under the switches; one bench each with and without them beside the peers.
source "$(dirname "$0")/device_call.sh"
run 150 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk_fast.py tests/test_cuda_attention_s13b.py
DSV4_TOPK_LEAN_FORM=window run 90 gpu-lean-window python3 -m pytest -q -m gpu tests/test_cuda_topk_lean.py
DSV4_TOPK_LEAN_FORM=window DSV4_TOPK_FAST_CUTS=255 run 60 chk-topk-switched python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
DSV4_ATTENTION_MATH=split run 200 chk-attn-split python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention &
DSV4_ATTENTION_MATH=split run 200 chk-fp8-split python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention_fp8 &
wait
B="python3 -m harness bench --device cuda"
TK=b64-16384,b1-65536,b1-65536-k1024,b256-16384,b256-16384-k1024,b64-short
run 90 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
DSV4_TOPK_LEAN_FORM=window DSV4_TOPK_FAST_CUTS=255 run 90 bench-topk-switched $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk-switched.json
AC=prefill-4096-h64-k640,prefill-4096-h128-k1152,decode-b64-h64-k640,decode-b64-h128-k1152
run 120 bench-attn $B --reps 10 --backend cuda,flashmla --ops sparse_attention --cases $AC --out $LOGS/bench-attn.json
DSV4_ATTENTION_MATH=split run 120 bench-attn-split $B --reps 10 --backend cuda,flashmla --ops sparse_attention --cases $AC --out $LOGS/bench-attn-split.json
bench_table $LOGS/*.json
