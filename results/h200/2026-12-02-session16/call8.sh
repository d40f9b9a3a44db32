#!/usr/bin/env bash
# Session 16, call 8 ($1 = commit): the one attention GPU test whose xdist worker crashed in call 7, alone
source "$(dirname "$0")/device_call.sh"
run 170 ws-out-prefill python3 -m pytest -q -rf -p no:cacheprovider -m gpu "tests/test_cuda_attention_s14c.py::test_ws_out_tma_writes_the_defaults_bits_on_the_gpu[prefill-4096-h64-k640]"
grep -v Warn $LOGS/ws-out-prefill.log | grep -E "^E |passed|failed|Error" | head -12
