#!/usr/bin/env bash
# Session 18, call 6 ($1): probe_fill.py and probe_mixed_load.py with topk_indices.cu's coarse bins (the count's real
# cost), and the least a floor under the histogram could leave
source "$(dirname "$0")/device_call.sh"
run 60 fill python3 ../probe_fill.py 32768
tail -n 11 $LOGS/fill.log
run 90 mixload python3 ../probe_mixed_load.py
tail -n 13 $LOGS/mixload.log
