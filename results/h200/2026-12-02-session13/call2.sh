#!/usr/bin/env bash
# Session 13, call 2 ($1 = commit: the defaults from call 1, twin<2> onewalk, the top-k early trigger, Q by TMA):
# check --full top-k, attention and FP8 attention; the GPU tests (Q copies vs TMA bitwise, twin vs wide<8>, the early
# trigger's bits); one bench run each beside SGLang (the #13 cases) and FlashMLA (the #15 cases); 1 x 65536's kernel
# times in the graph replay.
source "$(dirname "$0")/device_call.sh"
run 60 chk-cuda-topk python3 -m harness check --backend cuda --device cuda --full --ops topk_indices
run 200 chk-cuda-attn python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention &
run 200 chk-cuda-fp8 python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention_fp8 &
wait
run 150 gpu-tests python3 -m pytest -q -m gpu --full tests/test_attention_q_tma.py tests/test_cuda_topk_twin.py tests/test_cuda_loader.py tests/test_cuda_topk.py -k "q_tma or twin or early or loader or active"
B="python3 -m harness bench --device cuda"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
run 150 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $LOGS/bench-topk.json
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 170 bench-attn $B --reps 10 --backend cuda,flashmla --ops sparse_attention --cases $AC --out $LOGS/bench-attn.json
run 40 graph-topk-ours python3 ../graph_kernels.py cuda topk_indices b1-65536
grep -v Warning $LOGS/graph-topk-ours.log | head -12
bench_table $LOGS/*.json
