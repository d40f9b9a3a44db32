#!/usr/bin/env bash
# Session 18, call 4 ($1): ncu warp-stall sampling (SourceCounters, WarpStateStats) of the planned mixed batch's wide<8>
# launch (one launch, cold: ncu flushes the caches between its passes), its SASS page and the stalls by opcode and line
source "$(dirname "$0")/device_call.sh"
NCU="ncu --clock-control none --section SourceCounters --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis"
src() {  # name case
  run 150 "$1" $NCU --kernel-name regex:dsv4_topk_indices_wide --launch-skip 2 --launch-count 1 -o /tmp/$1 python3 ../ncu_any.py cuda topk_indices $2
  timeout 60 ncu -i /tmp/$1.ncu-rep --page source --csv --print-source sass > $LOGS/$1.sass.csv 2>&1 || echo "source page rc=$?"
  timeout 30 ncu -i /tmp/$1.ncu-rep --page details >> $LOGS/$1.log 2>&1
  python3 ../stalls.py $LOGS/$1.sass.csv > $LOGS/$1.stalls.txt 2>&1
  tar czf "$OUT/logs.tgz" -C "$LOGS" .
  grep -E "Duration|Stall|Issued Warp|Memory Throughput|DRAM Throughput" $LOGS/$1.log | head -12
  head -45 $LOGS/$1.stalls.txt
}
src ncu-mixed b64-mixed-to-262144
