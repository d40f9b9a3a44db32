#!/usr/bin/env bash
# Session 14, call 2 ($1 = commit): where ours issues its extra instructions at prefill H64: ncu SourceCounters +
# InstructionStats of one launch each, ours and FlashMLA's, and their SASS pages (executed instructions a line).
source "$(dirname "$0")/device_call.sh"
NCU="ncu --clock-control none --section SourceCounters --section InstructionStats --section WarpStateStats"
src() {  # name kernel-regex backend case
  run 120 "$1" $NCU --kernel-name regex:$2 --launch-skip 2 --launch-count 1 -o /tmp/$1 python3 ../ncu_any.py $3 sparse_attention $4
  timeout 60 ncu -i /tmp/$1.ncu-rep --page source --csv --print-source sass > $LOGS/$1.sass.csv 2>&1 || echo "source page rc=$?"
  timeout 30 ncu -i /tmp/$1.ncu-rep --page details >> $LOGS/$1.log 2>&1
  tar czf "$OUT/logs.tgz" -C "$LOGS" .
  grep -E "Executed Instructions|Issued Instructions|Duration" $LOGS/$1.log | head -6
}
src src-ours-h64 dsv4_sparse_attention_ws cuda prefill-4096-h64-k640
src src-fm-h64 sparse_attn_fwd flashmla prefill-4096-h64-k640
