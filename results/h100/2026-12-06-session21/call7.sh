#!/usr/bin/env bash
# Session 21, call 7 ($1 = the commit): the top-k planner's host cost, piece by piece (plan_cost.py)
source "$(dirname "$0")/device_call.sh"
run 120 plan-cost python3 ../plan_cost.py  # (copy it to .gpu/ first)
cat $LOGS/plan-cost.log
