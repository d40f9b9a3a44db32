#!/usr/bin/env bash
# Session 18, call 2 ($1): probe_fill.py (what bounds a 128 KB chunk's load and count on one SM), 32K and 16K columns
source "$(dirname "$0")/device_call.sh"
run 60 fill python3 ../probe_fill.py 32768
tail -n 10 $LOGS/fill.log
run 60 fill16 python3 ../probe_fill.py 16384
tail -n 10 $LOGS/fill16.log
