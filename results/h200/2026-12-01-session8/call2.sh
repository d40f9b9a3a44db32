#!/usr/bin/env bash
# Session 8, call 2: the top-k plan's bitwise test; top-k routing knobs on the cases that fall short; ncu of the mixed case planned vs device-routed; FP8 attention check --full with every backend (#17).
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
DC=$(cd ../.. && pwd)/.devcache; mkdir -p $DC/tc $DC/sj; du -sh $DC
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc TRITON_CACHE_DIR=$DC/tc SGLANG_JIT_CACHE_DIR=$DC/sj
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
mkdir -p $OUT/k
run 60 test-routings python3 -m pytest -q -p no:cacheprovider tests/test_cuda_topk.py -k device_routings_bits
B="python3 -m harness bench --backend cuda --ops topk_indices --device cuda --reps 15"
run 40 k-base $B --cases b64-262144,b64-mixed-to-262144,b1-65536,b256-16384,b64-65536 --out $OUT/k/base.json
DSV4_TOPK_CLUSTER16=0 run 40 k-c8 $B --cases b64-262144,b64-mixed-to-262144,b1-65536 --out $OUT/k/c8.json
DSV4_TOPK_KERNEL=split run 40 k-split $B --cases b64-mixed-to-262144 --out $OUT/k/split.json
DSV4_TOPK_SOLO=0 run 40 k-nosolo $B --cases b64-mixed-to-262144 --out $OUT/k/nosolo.json
DSV4_TOPK_MANY_ROWS=fast run 40 k-manyfast $B --cases b256-16384 --out $OUT/k/manyfast.json
DSV4_TOPK_KERNEL=v2 run 40 k-v2 $B --cases b1-65536,b64-65536 --out $OUT/k/v2.json
run 60 ncu-mixed ncu --kernel-name regex:dsv4_topk --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats python3 ../ncu_topk.py b64-mixed-to-262144
DSV4_TOPK_ROUTE=device run 60 ncu-mixed-dev ncu --kernel-name regex:dsv4_topk --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats python3 ../ncu_topk.py b64-mixed-to-262144
grep -h "topk_indices/" $OUT/k-*.log | grep -v skip | cut -c1-120
run 420 check-fp8-peers python3 -m harness check --backend torch triton cuda sglang deepgemm flashmla flashinfer flashinfer_deterministic --device cuda --ops sparse_attention_fp8 --full --verbose
du -sh $DC
tar -czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
grep -E "^[0-9]+ passed|failed|known|declined" $OUT/check-fp8-peers.log | tail -5
