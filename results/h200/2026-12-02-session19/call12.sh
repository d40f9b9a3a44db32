#!/usr/bin/env bash
# Session 18's call 12, run in session 19 ($1 = main's commit; the snapshot patched with phase1.patch in src2/): probe_phase1.py with the
# kernel stopping after the counts before each CTA (DSV4_TOPK_TRACE=4), the counting walk (5), the placing walk (6);
# run from session 18's phase1.patch; session 19 ran it with 2 and 3 as well (probe_phase1.py: session 18's folder)
source "$(dirname "$0")/device_call.sh"
cd ../src2 && export PYTHONPATH=/tmp/site:$PWD
for v in 2 3 4 5 6; do  # (2 and 3: the rerun of calls 10-11 beside them)
  run 60 phase1-$v env DSV4_TOPK_TRACE=$v python3 ../probe_phase1.py
  grep -v "Warning\|main()\|warn" $LOGS/phase1-$v.log | head -9
done
