#!/usr/bin/env bash
# Session 22, call 2 ($1 = the commit): the top-k planner's host cost, piece by piece (plan_cost.py)
source "$(dirname "$0")/device_call.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
run 120 plan-cost python3 ../plan_cost.py
cat $LOGS/plan-cost.log
