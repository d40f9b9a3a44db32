#!/usr/bin/env bash
# Session 21, call 4 ($1 = the commit; the machine of call 3, SGLang's kernels built): both short batches with the
# plan's copy beside SGLang, twice
source "$(dirname "$0")/device_call.sh"
S=b64-short,b64-short-k1024
for i in 1 2; do
  run 40 short-both-$i python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $S --out $LOGS/short-both-$i.json
done
bench_table $LOGS/short-both-*.json
