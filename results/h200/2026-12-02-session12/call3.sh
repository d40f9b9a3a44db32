#!/usr/bin/env bash
# Session 12, call 3 ($1 = commit): diagnostics for the next session with the device time left: ncu of twin<2> at
# 64 x 262144 (per-instruction samples, occupancy, memory), and the graph-replay kernel times there, ours and SGLang's.
source "$(dirname "$0")/device_call.sh"
NCU="ncu --clock-control none"
SECS="--section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
run 90 ncu-topk-twin2 $NCU --kernel-name regex:dsv4_topk --launch-skip 2 --launch-count 1 $SECS -o /tmp/twin2 python3 ../ncu_any.py cuda topk_indices b64-262144
timeout 40 ncu -i /tmp/twin2.ncu-rep --page source --csv --print-source sass > $LOGS/ncu-topk-twin2.sass.csv 2>&1
timeout 30 ncu -i /tmp/twin2.ncu-rep --page details >> $LOGS/ncu-topk-twin2.log 2>&1
tar czf "$OUT/logs.tgz" -C "$LOGS" .
GK="python3 ../graph_kernels.py"
run 45 graph-topk-ours $GK cuda topk_indices b64-262144
run 45 graph-topk-sgl $GK sglang topk_indices b64-262144
grep -E "Duration|SM Active|Elapsed|Max Active Clusters|Achieved Occupancy|DRAM Throughput" $LOGS/ncu-topk-twin2.log
grep -v Warning $LOGS/graph-topk-*.log | grep -v warn_once | head
