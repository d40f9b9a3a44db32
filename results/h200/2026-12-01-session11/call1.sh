#!/usr/bin/env bash
# Session 11, call 1 ($1 = commit): where the split decode's time goes as the bench runs it (kernel_times.py), and the
# L2-policy A/Bs of the ws kernel (DSV4_ATTENTION_KV_POLICY, DSV4_ATTENTION_PART_POLICY), cuda only.
set -uo pipefail
cd "$(dirname "$0")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
run() { local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout $t "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" $OUT/$name.log | head -8; tail -n 1 $OUT/$name.log; }
KT="python3 ../kernel_times.py"
D=decode-b64-h64-k640
run 120 kt-flashmla $KT flashmla sparse_attention $D decode-b64-h128-k1152
run 120 kt-default $KT cuda sparse_attention $D hca-decode-b64-h64-k8320 decode-b8-h64-k640 decode-b64-h128-k1152
B="python3 -m harness bench --device cuda --backend cuda --ops sparse_attention --reps 10"
AC=decode-b1-h64-k640,decode-b8-h64-k640,decode-b64-h64-k640,decode-b256-h64-k640,decode-b64-h128-k1152,hca-decode-b64-h64-k8320
for v in "DSV4_ATTENTION_KV_POLICY=first" "DSV4_ATTENTION_PART_POLICY=last" "DSV4_ATTENTION_KV_POLICY=first DSV4_ATTENTION_PART_POLICY=last"; do
  tag=$(echo $v | sed -e 's/DSV4_ATTENTION_//g' -e 's/ /+/g' -e 's/=/-/g' | tr A-Z a-z)
  env $v bash -c "$(declare -f run); run 120 kt-$tag $KT cuda sparse_attention $D hca-decode-b64-h64-k8320"
  env $v bash -c "$(declare -f run); run 150 bench-$tag $B --cases $AC --out $OUT/bench-$tag.json"
done
for f in $OUT/kt-*.log; do echo "#### $(basename $f)"; grep -E "^##|^   " $f; done > $OUT/kernel-times.txt
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
cat kernel-times.txt
for f in $OUT/*.json; do echo "## $(basename $f)"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['records']:
    t=r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict','?'):5s} {t.get('median_us',0):8.1f} {t.get('clock','')[:10]} {r.get('pct_copy') or 0:.1f}%\")
" $f; done
