#!/usr/bin/env bash
# Session 12, call 1 ($1 = commit: the three helper branches merged, every new switch opt-in): each switch checked
# (cuda check --full, the twin GPU tests) and timed against the default: twin<2> (DSV4_TOPK_TWIN), the persistent
# grid's tail split (DSV4_ATTENTION_TAIL=split), the producer's indices ahead and the next pair's rows prefetched to L2 (DSV4_ATTENTION_PRODUCER=ahead|prefetch); then
# the graph-replay kernel times (graph_kernels.py) at 1x65536 and 64x16384, ours and SGLang's.
source "$(dirname "$0")/device_call.sh"
CK="python3 -m harness check --backend cuda --device cuda --full"
( DSV4_TOPK_TWIN=auto run 200 chk-topk-twinauto $CK --ops topk_indices ) &
( run 200 test-twin python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_topk_twin.py tests/test_cuda_attention_tail.py tests/test_cuda_attention_producer.py ) &
( DSV4_ATTENTION_TAIL=split run 240 chk-attn-tail $CK --ops sparse_attention sparse_attention_fp8 ) &
( DSV4_ATTENTION_PRODUCER=ahead run 240 chk-attn-ahead $CK --ops sparse_attention sparse_attention_fp8 ) &
( DSV4_ATTENTION_PRODUCER=prefetch run 240 chk-attn-prefetch $CK --ops sparse_attention sparse_attention_fp8 ) &
( DSV4_ATTENTION_TAIL=split DSV4_ATTENTION_PRODUCER=prefetch run 240 chk-attn-both $CK --ops sparse_attention sparse_attention_fp8 ) &
wait
grep -E "^FAILED|^ERROR|passed|failed" $OUT/test-twin.log | tail -4
python3 -c "import importlib, torch; T = importlib.import_module('kernels_cuda.topk_indices'); d = torch.cuda.current_device(); print('max active clusters', {c: T._max_active_clusters(k, T.twin_launch(64, 262144, True, 132, 1, c)[2], d) for c, k in T.TWIN_KERNELS.items()})"
B="python3 -m harness bench --device cuda"
TK=b64-262144,b64-mixed-to-262144,b64-mixed-to-262144-k1024
run 120 bench-topk $B --reps 15 --backend cuda,sglang --ops topk_indices --cases $TK --out $OUT/bench-topk.json
DSV4_TOPK_TWIN=2 run 90 bench-topk-twin2 $B --reps 15 --backend cuda --ops topk_indices --cases $TK --out $OUT/bench-topk-twin2.json
DSV4_TOPK_TWIN=auto run 90 bench-topk-twinauto $B --reps 15 --backend cuda --ops topk_indices --cases $TK --out $OUT/bench-topk-twinauto.json
AC=decode-b64-h64-k640,decode-b64-h128-k1152,decode-b256-h64-k640,prefill-4096-h64-k640,prefill-4096-h128-k1152
run 150 bench-attn $B --reps 10 --backend cuda --ops sparse_attention --cases $AC --out $OUT/bench-attn.json
DSV4_ATTENTION_TAIL=split run 150 bench-attn-tail $B --reps 10 --backend cuda --ops sparse_attention --cases $AC --out $OUT/bench-attn-tail.json
DSV4_ATTENTION_PRODUCER=ahead run 150 bench-attn-ahead $B --reps 10 --backend cuda --ops sparse_attention --cases $AC --out $OUT/bench-attn-ahead.json
DSV4_ATTENTION_PRODUCER=prefetch run 150 bench-attn-prefetch $B --reps 10 --backend cuda --ops sparse_attention --cases $AC --out $OUT/bench-attn-prefetch.json
DSV4_ATTENTION_TAIL=split DSV4_ATTENTION_PRODUCER=prefetch run 150 bench-attn-both $B --reps 10 --backend cuda --ops sparse_attention --cases $AC --out $OUT/bench-attn-both.json
GK="python3 ../graph_kernels.py"
run 90 graph-topk-ours $GK cuda topk_indices b1-65536 b64-16384
run 90 graph-topk-sgl $GK sglang topk_indices b1-65536 b64-16384
cat $OUT/graph-topk-*.log | grep -v Warning | head -30
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
bench_table $OUT/*.json
