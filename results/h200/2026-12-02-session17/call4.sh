#!/usr/bin/env bash
# Session 17, call 4 ($1): probe_warm.py traced (cold vs warm phase costs) and untimed build (events flushed / not)
source "$(dirname "$0")/device_call.sh"
run 120 warm-trace env DSV4_TOPK_TRACE=1 python3 ../probe_warm.py $LOGS
tail -n 30 $LOGS/warm-trace.log
run 120 warm-time python3 ../probe_warm.py $LOGS
tail -n 3 $LOGS/warm-time.log
