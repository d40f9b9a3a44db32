#!/usr/bin/env bash
# Session 18, call 11 ($1 = main's commit; the snapshot patched with phase1.patch in src2/): probe_phase1.py with the
# kernel stopping after its first phase (DSV4_TOPK_TRACE=2) and after the threshold (3)
source "$(dirname "$0")/device_call.sh"
cd ../src2 && export PYTHONPATH=/tmp/site:$PWD
for v in 2 3; do
  run 90 phase1-$v env DSV4_TOPK_TRACE=$v python3 ../probe_phase1.py
  grep -v "Warning\|main()\|warn" $LOGS/phase1-$v.log | head -12
done
