#!/usr/bin/env bash
# Session 8, call 3: v4-pro bench of compress and FP8 attention with every backend (#17), the compile caches of call 2 kept on the warm machine.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
DC=$(cd ../.. && pwd)/.devcache; mkdir -p $DC/tc $DC/sj; du -sh $DC
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc TRITON_CACHE_DIR=$DC/tc SGLANG_JIT_CACHE_DIR=$DC/sj
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; tail -n 2 $OUT/$name.log; }
run 470 bench-v4-pro python3 -m harness bench --cases v4-pro --ops compress sparse_attention_fp8 --device cuda --reps 10 --backend torch triton cuda sglang deepgemm flashmla flashinfer flashinfer_deterministic --out $OUT/bench-v4-pro-compress-fp8.json
du -sh $DC
grep -hE "^\[" $OUT/bench-v4-pro.log | grep -v skip | cut -c1-110 | tail -40
