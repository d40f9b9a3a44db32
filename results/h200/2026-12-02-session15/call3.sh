#!/usr/bin/env bash
# Session 15, call 3 ($1 = commit): prefill A/B at the new defaults (WS_OUT=tma, ORDER=rows) against P_STORE=stmatrix,
# QO_POLICY=first and both, beside FlashMLA; check --full under the two stmatrix forms.
source "$(dirname "$0")/device_call.sh"
A="python3 -m harness bench --device cuda --ops sparse_attention --reps 10"
P=prefill-4096-h64-k640,prefill-4096-h128-k1152
S=DSV4_ATTENTION_P_STORE=stmatrix; Q=DSV4_ATTENTION_QO_POLICY=first
run 30 chk-stm env $S python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention sparse_attention_fp8
run 30 chk-stm-qo env $S $Q python3 -m harness check --backend cuda --device cuda --full --ops sparse_attention sparse_attention_fp8
run 60 bench-def $A --backend cuda,flashmla --cases $P --out $LOGS/bench-def.json
run 40 bench-stm env $S $A --backend cuda --cases $P --out $LOGS/bench-stm.json
run 40 bench-stm-qo env $S $Q $A --backend cuda --cases $P --out $LOGS/bench-stm-qo.json
run 40 bench-qo env $Q $A --backend cuda --cases $P --out $LOGS/bench-qo.json
run 40 bench-stm2 env $S $A --backend cuda --cases $P --out $LOGS/bench-stm2.json
run 40 bench-def2 $A --backend cuda --cases $P --out $LOGS/bench-def2.json
bench_table $LOGS/bench-*.json
