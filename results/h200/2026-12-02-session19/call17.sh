#!/usr/bin/env bash
# Session 19, call 17 ($1 = main's commit): probe_beside.py launches (clusters launched while the loaders load)
source "$(dirname "$0")/device_call.sh"
run 120 launches python3 ../probe_beside.py launches
grep -v Warn $LOGS/launches.log | tail -9
