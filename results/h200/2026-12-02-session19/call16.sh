#!/usr/bin/env bash
# Session 19, call 16 ($1 = main's commit): probe_codefetch.py (a first pass over cold code while the CTA's own chunk
# is in flight)
source "$(dirname "$0")/device_call.sh"
run 120 codefetch python3 ../probe_codefetch.py
grep -v Warn $LOGS/codefetch.log | tail -9
