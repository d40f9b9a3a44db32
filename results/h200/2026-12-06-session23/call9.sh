#!/usr/bin/env bash
# Session 23, call 9 ($1 = the commit): on an H200, #13's whole run in one call: the twelve cases beside SGLang,
# check --full of top-k for CUDA, then for Triton as four processes over a round-robin split of its 43 cases (the
# union is --full's set; the time is Triton's compiles, CPU-bound), then lean_regs' phases at 1 x 65536 k512 / k1024
# (lean_trace.py, the trace build), then the top-k GPU tests. On another card: the trace only.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/device_call.sh"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
if [[ "$GPU" == *H200* ]]; then
  TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
  run 200 bench-topk python3 -m harness bench --device cuda --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
  cp $LOGS/bench-topk.json $OUT/
  run 80 chk-cuda python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
  CASES=$(python3 -m harness check --list-cases --full --ops topk_indices | awk -F'|' 'NR>2 {gsub(/ /,"",$5); print $5}')
  echo "$(echo "$CASES" | wc -l) cases"
  pids=()
  for part in 0 1 2 3; do
    group=$(echo "$CASES" | awk -v p=$part 'NR % 4 == p' | paste -sd,)
    run 240 chk-triton-$part python3 -m harness check --backend triton --device cuda --full --ops topk_indices --case "$group" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait $p; done
  grep -H "passed, .* failed" $LOGS/chk-triton-*.log
  tar czf "$OUT/logs.tgz" -C "$LOGS" .
fi
DSV4_TOPK_TRACE=1 run 60 lean-trace python3 ../lean_trace.py
cat $LOGS/lean-trace.log
[[ "$GPU" == *H200* ]] && run 120 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_cuda_topk_fast.py tests/test_plans.py
[[ -f $LOGS/bench-topk.json ]] && bench_table $LOGS/bench-topk.json
