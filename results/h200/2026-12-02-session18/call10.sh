#!/usr/bin/env bash
# Session 18, call 10 ($1 = main's commit; the snapshot patched with phase1.patch in src2/): the mixed batch's first
# phase in the kernel (DSV4_TOPK_TRACE=2: every CTA stops after it) against the same chunks in the probe, one process
source "$(dirname "$0")/device_call.sh"
cd ../src2 && export PYTHONPATH=/tmp/site:$PWD
run 90 phase1 env DSV4_TOPK_TRACE=2 python3 ../probe_phase1.py
tail -n 30 $LOGS/phase1.log
