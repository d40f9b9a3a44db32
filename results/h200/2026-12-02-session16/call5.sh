#!/usr/bin/env bash
# Session 16, call 5 ($1 = commit): DSV4_TOPK_WIDE_STAGES=4 / 8 against the default (2): every top-k bench case, cuda
# alone, one process a setting, default first and last (spread); the stages' GPU tests (bitwise the default build)
source "$(dirname "$0")/device_call.sh"
TK=b64-16384,b64-65536,b64-262144,b1-65536,b256-16384,b64-mixed-to-262144,b64-short,b64-65536-k1024,b64-65536-k2048,b64-mixed-to-262144-k1024,b256-16384-k1024,b1-65536-k1024
B="python3 -m harness bench --device cuda --ops topk_indices --backend cuda --reps 15 --cases $TK"
run 70 bench-s2 $B --out $LOGS/s2.json
DSV4_TOPK_WIDE_STAGES=4 run 70 bench-s4 $B --out $LOGS/s4.json
DSV4_TOPK_WIDE_STAGES=8 run 70 bench-s8 $B --out $LOGS/s8.json
run 70 bench-s2b $B --out $LOGS/s2b.json
python3 - $LOGS/s2.json $LOGS/s4.json $LOGS/s8.json $LOGS/s2b.json <<'PY'
import json, sys
runs = [{r["case"]: r for r in json.load(open(f))["records"]} for f in sys.argv[1:]]
print(f"{'case':28s} {'s2':>12s} {'s4':>12s} {'s8':>12s} {'s2 again':>12s}   (median us, g = graph; events median)")
for case in runs[0]:
    cells = []
    for run in runs:
        r = run.get(case)
        t = r["timing"] if r else {}
        g = "g" if t.get("clock") == "cuda-graph" else " "
        ev = r["extra"].get("events_median_us") if r else None
        cells.append(f"{t.get('median_us', 0):6.2f}{g}/{ev or t.get('median_us', 0):5.1f}")
    print(f"{case:28s} " + " ".join(f"{c:>12s}" for c in cells), r["verdict"])
PY
run 200 gpu-tests python3 -m pytest -q -rf -x -p no:cacheprovider -n 8 -m gpu tests/test_cuda_topk_s16a.py
tail -n 3 $LOGS/gpu-tests.log
