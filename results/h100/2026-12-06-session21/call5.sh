#!/usr/bin/env bash
# Session 21, call 5 ($1 = the commit): every top-k GPU test (the short plan's copy among them) and the window's
source "$(dirname "$0")/device_call.sh"
run 150 gpu-tests python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_cuda_topk_s14b.py tests/test_cuda_loader.py tests/test_plans.py -k "topk or plan"
