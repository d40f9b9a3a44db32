#!/usr/bin/env bash
# Session 22, call 7 ($1 = the commit; prepared, not run): lean_regs<8, 2>'s phases at 1 x 65536 k512 / k1024
# (lean_trace.py, the trace build); on an H200 then call 6 (#13's twelve cases beside SGLang, check --full of top-k for
# CUDA and Triton)
HERE=$(cd "$(dirname "$0")" && pwd)  # (device_call.sh changes the directory)
source "$HERE/device_call.sh"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
DSV4_TOPK_TRACE=1 run 90 lean-trace python3 ../lean_trace.py
cat $LOGS/lean-trace.log
[[ "$GPU" == *H200* ]] && bash "$HERE/call6.sh" "$1"
