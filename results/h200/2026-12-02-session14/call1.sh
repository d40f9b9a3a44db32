#!/usr/bin/env bash
# Session 14, call 1 ($1 = commit): ncu memory/warp-state sections of the prefill kernels, ours (ws) and FlashMLA's,
# H64 and H128 (is prefill bound by the L2's bandwidth?); Triton check --full of top-k (issue 13's "both backends").
source "$(dirname "$0")/device_call.sh"
NCU="ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis"
prof() {  # name kernel-regex backend case
  run 90 "$1" $NCU --kernel-name regex:$2 --launch-skip 2 --launch-count 1 python3 ../ncu_any.py $3 sparse_attention $4
  grep -E "L2 Hit|L1/TEX Hit|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Duration|Compute \(SM\) Throughput|Mem Busy|Max Bandwidth|Registers|Stall|Issued Ipc|Warp Cycles Per Issued" $LOGS/$1.log | head -30
}
prof ncu-ours-h64 dsv4_sparse_attention_ws cuda prefill-4096-h64-k640
prof ncu-fm-h64 sparse_attn_fwd flashmla prefill-4096-h64-k640
prof ncu-ours-h128 dsv4_sparse_attention_ws cuda prefill-4096-h128-k1152
prof ncu-fm-h128 sparse_attn_fwd flashmla prefill-4096-h128-k1152
SHARD_DIR=$LOGS run 200 chk-triton-topk bash ../check_shards.sh triton 8 topk_indices
