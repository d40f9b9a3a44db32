#!/usr/bin/env bash
# Session 19, call 13 ($1 = main's commit): probe_hog.py (other SMs' instruction fetch beside a chunk load), then every
# CTA's stamps of the mixed batch under DSV4_TOPK_TRACE=1..6 (the patched snapshot in src2/) for the CPU's analysis
source "$(dirname "$0")/device_call.sh"
run 120 hog python3 ../probe_hog.py
cat $LOGS/hog.log | tail -42
cd ../src2 && export PYTHONPATH=/tmp/site:$PWD
for v in 1 2 3 4 5 6; do
  run 60 timeline-$v env OUT=$LOGS DSV4_TOPK_TRACE=$v python3 ../probe_timeline.py
done
