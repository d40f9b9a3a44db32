#!/usr/bin/env bash
# Session 22, call 3: ncu of half<4> at 256 x 16384 k512 (what its 12 us are)
source "$(dirname "$0")/device_call.sh"
run 150 ncu timeout 140 ncu --kernel-name regex:half --launch-skip 3 --launch-count 1 --set full python3 ../ncu_half.py
grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Executed Ipc|Issue Slots|Registers|Achieved Occupancy|Warp Cycles Per Issued|Stall|One or More|No Eligible|Active Warps|Eligible Warps|Executed Instructions|L2 Hit|Shared.*Bank|Elapsed Cycles|SM Frequency|DRAM Frequency" $LOGS/ncu.log | head -60
