#!/usr/bin/env bash
# Session 19, call 15 ($1 = main's commit): probe_tlb.py (the trace build, src2/): are the late loaders held by
# address translation after the flush?
source "$(dirname "$0")/device_call.sh"
cd ../src2 && export PYTHONPATH=/tmp/site:$PWD
run 120 tlb env DSV4_TOPK_TRACE=1 python3 ../probe_tlb.py
grep -v Warn $LOGS/tlb.log | tail -9
