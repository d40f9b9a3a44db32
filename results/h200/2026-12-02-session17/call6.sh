#!/usr/bin/env bash
# Session 17, call 6 ($1): why the floor was slower: the mixed batch traced under it (cold / warm phases), and the
# events of the planned call with and without the flush, floor on and off
source "$(dirname "$0")/device_call.sh"
run 60 warm-trace env DSV4_TOPK_TRACE=1 python3 ../probe_warm.py $LOGS
head -n 9 $LOGS/warm-trace.log; tail -n 1 $LOGS/warm-trace.log
for f in 1 0; do
  run 40 warm-time-$f env DSV4_TOPK_WIDE_FLOOR=$f python3 ../probe_warm.py $LOGS
  tail -n 2 $LOGS/warm-time-$f.log
done
