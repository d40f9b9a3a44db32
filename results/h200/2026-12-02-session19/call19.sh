#!/usr/bin/env bash
# Session 19, call 19 ($1 = main's commit): probe_beside.py gather (the counts before's all-to-one reads beside loads)
source "$(dirname "$0")/device_call.sh"
run 120 gather python3 ../probe_beside.py gather
grep -v Warn $LOGS/gather.log | tail -9
