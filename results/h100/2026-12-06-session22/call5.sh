#!/usr/bin/env bash
# Session 22, call 5 ($1 = the commit): under DSV4_TOPK_HALF_CUTS=3, check --full of top-k (CUDA) and the top-k GPU tests
source "$(dirname "$0")/device_call.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
export DSV4_TOPK_HALF_CUTS=3
run 80 chk-cuda-h3 python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 300 gpu-tests-h3 python3 -m pytest -q -m gpu tests/test_cuda_topk.py tests/test_cuda_topk_fast.py tests/test_plans.py -x
