#!/usr/bin/env bash
# Session 17, call 3 ($1 = commit + working tree: the trace's SM column): the trace test, then probe_order.py (the
# mixed batch's places permuted) traced (SMs, GPCs) and timed (events, graph)
source "$(dirname "$0")/device_call.sh"
run 90 gpu-trace python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/test_cuda_topk_trace.py
tail -n 2 $LOGS/gpu-trace.log
run 120 order-trace env DSV4_TOPK_TRACE=1 python3 ../probe_order.py $LOGS
cat $LOGS/order-trace.log | tail -n 10
run 200 order-time python3 ../probe_order.py $LOGS
cat $LOGS/order-time.log | tail -n 10
