#!/usr/bin/env bash
# Session 16, call 4 ($1 = commit): the mixed batch's 17th place (probe_places.py)
source "$(dirname "$0")/device_call.sh"
run 150 probe-places python3 ../probe_places.py
grep -v Warn $LOGS/probe-places.log | grep -v "^ "
