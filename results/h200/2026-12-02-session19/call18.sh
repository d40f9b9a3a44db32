#!/usr/bin/env bash
# Session 19, call 18 ($1 = main's commit): every CTA's stamps of the mixed batch (10 cold calls) under
# DSV4_TOPK_TRACE=3 (stop after the threshold), 7 (the same past a cluster barrier), 4 (after the counts before, past
# a cluster barrier), 1 (the whole kernel); the patched snapshot in src2/
source "$(dirname "$0")/device_call.sh"
cd ../src2 && export PYTHONPATH=/tmp/site:$PWD
for v in 3 7 4 1; do
  run 90 timeline-$v env OUT=$LOGS CALLS=11 DSV4_TOPK_TRACE=$v python3 ../probe_timeline.py
done
