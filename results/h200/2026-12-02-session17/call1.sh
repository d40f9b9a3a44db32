#!/usr/bin/env bash
# Session 17, call 1 ($1 = commit): the top-k trace build on the GPU (its tests, then the mixed batch's trace at
# k 512 / 1024 and the 64 x 262144 batch's), then the attention test left open by session 16, alone
source "$(dirname "$0")/device_call.sh"
run 120 gpu-trace python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/test_cuda_topk_trace.py
tail -n 3 $LOGS/gpu-trace.log
for c in b64-mixed-to-262144 b64-mixed-to-262144-k1024 b64-262144; do
  run 90 trace-$c python3 -m kernels_cuda.topk_trace --case $c --reps 5 --out $LOGS/trace-$c.json
  cat $LOGS/trace-$c.log | tail -n 20
done
run 330 gpu-attn4096 python3 -m pytest -q -rf -p no:cacheprovider -m gpu "tests/test_cuda_attention_s14c.py::test_ws_out_tma_writes_the_defaults_bits_on_the_gpu[prefill-4096-h64-k640]" --durations=3
tail -n 8 $LOGS/gpu-attn4096.log
