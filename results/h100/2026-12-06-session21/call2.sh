#!/usr/bin/env bash
# Session 21, call 2 ($1 = the commit): the short batches with fast<1> launched with and without PDL, three
# alternating pairs beside SGLang
source "$(dirname "$0")/device_call.sh"
S=b64-short,b64-short-k1024
for i in 1 2 3; do
  run 40 short-pdl-$i python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $S --out $LOGS/short-pdl-$i.json
  run 40 short-nopdl-$i python3 ../nopdl.py bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $S --out $LOGS/short-nopdl-$i.json
done
bench_table $LOGS/short-*.json
