#!/usr/bin/env bash
# Session 18, call 7 ($1): probe_code.py (the traced mixed batch: all cold, code warm and rows cold, all warm)
source "$(dirname "$0")/device_call.sh"
run 90 code env DSV4_TOPK_TRACE=1 python3 ../probe_code.py $LOGS
tail -n 40 $LOGS/code.log
