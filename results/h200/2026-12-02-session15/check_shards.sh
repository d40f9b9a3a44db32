#!/usr/bin/env bash
# check_shards.sh BACKEND N OPS... : harness check --full for BACKEND over OPS, its cases dealt round-robin into N
# processes run at once (Triton's JIT compiles on the CPU: one process compiles serially). Logs: ${SHARD_DIR:-$OUT}/shard-BACKEND-i.log
set -uo pipefail
be=$1; n=$2; shift 2
python3 -m harness check --backend $be --device cuda --ops "$@" --full --list-cases | awk -F'|' 'NR>2{gsub(/ /,"",$5); print $5}' | sort -u > /tmp/cases-$be
echo "$(wc -l < /tmp/cases-$be) cases in $n shards"
for i in $(seq 0 $((n-1))); do
  awk -v n=$n -v i=$i 'NR%n==i' /tmp/cases-$be | paste -sd, > /tmp/shard-$be-$i
  python3 -m harness check --backend $be --device cuda --ops "$@" --full --case $(cat /tmp/shard-$be-$i) > ${SHARD_DIR:-$OUT}/shard-$be-$i.log 2>&1 &
done
wait
for i in $(seq 0 $((n-1))); do echo "shard $i: $(tail -n 1 ${SHARD_DIR:-$OUT}/shard-$be-$i.log)"; grep -A4 "failing (backend" ${SHARD_DIR:-$OUT}/shard-$be-$i.log | head -6; done
