#!/usr/bin/env bash
# Session 20, call 2 ($1 = the commit): traces of the mixed batch: gate off, on (long CTAs), on for every CTA
source "$(dirname "$0")/device_call.sh"
for v in g0:0:24576 g1:1:24576 g1c:1:1 g0b:0:24576 g1cb:1:1; do IFS=: read name g c <<< "$v"
run 90 trace-$name env DSV4_TOPK_GATE=$g DSV4_TOPK_GATE_COLUMNS=$c DSV4_TOPK_TRACE=1 python3 -m kernels_cuda.topk_trace --reps 7 --out $LOGS/trace-$name.json; done
for f in $LOGS/trace-*.log; do head -n 1 $f; done
