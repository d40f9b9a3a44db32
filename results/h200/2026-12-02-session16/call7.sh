#!/usr/bin/env bash
# Session 16, call 7 ($1 = commit): the attention GPU tests of session 15's defaults (s14c, s14b, Q by TMA), whole
source "$(dirname "$0")/device_call.sh"
run 330 gpu-attn python3 -m pytest -q -rf -p no:cacheprovider -n 16 -m gpu tests/test_cuda_attention_s14c.py tests/test_cuda_attention_s14b.py tests/test_attention_q_tma.py
grep -v Warn $LOGS/gpu-attn.log | tail -n 6
