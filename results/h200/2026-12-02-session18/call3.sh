#!/usr/bin/env bash
# Session 18, call 3 ($1): probe_mixed_load.py (the mixed batch's first phase alone: clusters or not, real offsets or packed)
source "$(dirname "$0")/device_call.sh"
run 90 mixload python3 ../probe_mixed_load.py
tail -n 10 $LOGS/mixload.log
