#!/usr/bin/env bash
# Session 17, call 2 ($1 = commit): call 1 again with read_trace through UnownedMemory and the s14c prefill case fixed
source "$(dirname "$0")/device_call.sh"
run 120 gpu-trace python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/test_cuda_topk_trace.py
tail -n 3 $LOGS/gpu-trace.log
for c in b64-mixed-to-262144 b64-mixed-to-262144-k1024; do
  run 90 trace-$c python3 -m kernels_cuda.topk_trace --case $c --reps 5 --out $LOGS/trace-$c.json
  tail -n 24 $LOGS/trace-$c.log
done
run 300 gpu-attn4096 python3 -m pytest -q -rf -p no:cacheprovider -m gpu "tests/test_cuda_attention_s14c.py::test_ws_out_tma_writes_the_defaults_bits_on_the_gpu[prefill-4096-h64-k640]" --durations=3
tail -n 8 $LOGS/gpu-attn4096.log
