#!/usr/bin/env bash
# Session 18, call 12 ($1 = main's commit; the snapshot patched with phase1.patch in src2/): probe_phase1.py with the
# kernel stopping after the counts before each CTA (DSV4_TOPK_TRACE=4), the counting walk (5), the placing walk (6)
source "$(dirname "$0")/device_call.sh"
cd ../src2 && export PYTHONPATH=/tmp/site:$PWD
for v in 4 5 6; do
  run 60 phase1-$v env DSV4_TOPK_TRACE=$v python3 ../probe_phase1.py
  grep -v "Warning\|main()\|warn" $LOGS/phase1-$v.log | head -9
done
