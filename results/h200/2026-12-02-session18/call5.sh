#!/usr/bin/env bash
# Session 18, call 5 ($1): probe_mixed_load.py with the shared-memory sizes (the L1 left beside them), then the planned
# mixed batch with its chunk buffer sized to its longest chunk (DSV4_TOPK_GROUPS_BOUND=34840: the same plan, 139 KB
# of dynamic shared memory instead of 160 KB) against the default, by bench (cuda only) and by trace
source "$(dirname "$0")/device_call.sh"
run 60 launch python3 ../probe_launch.py
tail -n 12 $LOGS/launch.log
run 90 mixload python3 ../probe_mixed_load.py
tail -n 14 $LOGS/mixload.log
AB=b64-mixed-to-262144,b64-mixed-to-262144-k1024
for v in 34840 0; do
  run 60 bound-$v env DSV4_TOPK_GROUPS_BOUND=$v python3 -m harness bench --device cuda --reps 20 --backend cuda --ops topk_indices --cases $AB --out $LOGS/bound-$v.json
  bench_table $LOGS/bound-$v.json
done
run 60 trace-bound env DSV4_TOPK_GROUPS_BOUND=34840 DSV4_TOPK_TRACE=1 python3 -m kernels_cuda.topk_trace --case b64-mixed-to-262144 --out $LOGS/trace-bound.json
grep -A6 "^class" $LOGS/trace-bound.log | head -8
