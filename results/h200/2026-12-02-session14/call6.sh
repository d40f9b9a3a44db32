#!/usr/bin/env bash
# Session 14, call 6 ($1 = commit, as call 5): which of PRODUCER=lean and WS_OUT=tma faults (call 5: an illegal
# address under all five attention switches): check --full under each alone; the prefill A/B of each that passes.
source "$(dirname "$0")/device_call.sh"
A="python3 -m harness bench --device cuda --ops sparse_attention --reps 10 --backend cuda"
P=prefill-4096-h64-k640,prefill-4096-h128-k1152,decode-b256-h64-k640
for s in DSV4_ATTENTION_PRODUCER=lean DSV4_ATTENTION_WS_OUT=tma; do
  n=${s#DSV4_ATTENTION_}; n=${n/=/-}
  run 60 chk-$n env $s python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention sparse_attention_fp8 && \
  grep -q " 0 failed" $LOGS/chk-$n.log && run 45 bench-$n env $s $A --cases $P --out $LOGS/bench-$n.json
done
bench_table $LOGS/*.json
