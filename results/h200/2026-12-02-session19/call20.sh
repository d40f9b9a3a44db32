#!/usr/bin/env bash
# Session 19, call 20 ($1 = main's commit): the trace build (src2/, phase1.patch with the run-time stop) run whole
# and stopped after the threshold at run time (STOP=4: the same SASS), alternately, 11 cold calls each
source "$(dirname "$0")/device_call.sh"
cd ../src2 && export PYTHONPATH=/tmp/site:$PWD
for s in 0 4; do run 90 timeline-1-stop$s env OUT=$LOGS CALLS=11 STOP=$s DSV4_TOPK_TRACE=1 python3 ../probe_timeline.py; done
for s in 4 0; do mkdir -p $LOGS/b; run 90 timeline-1-stop$s-b env OUT=$LOGS/b CALLS=11 STOP=$s DSV4_TOPK_TRACE=1 python3 ../probe_timeline.py; done
