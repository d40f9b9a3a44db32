#!/usr/bin/env bash
# Session 19, call 14 ($1 = main's commit): probe_beside.py (which kind of other clusters' work slows a chunk load)
source "$(dirname "$0")/device_call.sh"
run 200 beside python3 ../probe_beside.py
grep -v Warn $LOGS/beside.log | tail -20
