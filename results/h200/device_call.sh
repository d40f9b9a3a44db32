# Sourced by a session's callN.sh (from .gpu/, beside src/, whl/ and kc/) on the device machine: installs the
# carried wheels (peers, nvtx) to /tmp/site, copies the prebuilt cubins, exports the harness environment for
# commit $1, and defines run (a named, time-limited step logged to $LOGS/NAME.log; after each step $LOGS is packed
# into $OUT/logs.tgz, so a call cut short by its time limit still brings back every finished step, in one file:
# the device returns at most 8) and bench_table (the medians of bench JSON files, one line a record).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[1]}")/src"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../whl/*.whl 2>/dev/null || exit 3
mkdir -p /tmp/kc && cp -r ../kc/. /tmp/kc/
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HARNESS_GIT_COMMIT=$1 DSV4_KERNEL_CACHE=/tmp/kc
LOGS=/tmp/logs; mkdir -p $LOGS
run() {  # SECONDS NAME COMMAND...: the first failing case's lines and the last line are echoed
  local t=$1 name=$2; shift 2; echo "== $name $(date +%T)"; timeout "$t" "$@" > "$LOGS/$name.log" 2>&1
  echo "rc=$? $name $(date +%T)"; grep -A6 "failing (backend" "$LOGS/$name.log" | head -8; tail -n 1 "$LOGS/$name.log"
  tar czf "$OUT/logs.tgz" -C "$LOGS" .
}
bench_table() {  # JSON...: backend, case, verdict, median, clock, TFLOP/s, % copy
  for f in "$@"; do echo "## $(basename "$f")"; python3 -c "
import json, sys
for r in json.load(open(sys.argv[1]))['records']:
    t = r.get('timing') or {}
    print(f\"{r['backend']:9s} {r['case']:28s} {r.get('verdict', '?'):5s} {t.get('median_us', 0):8.2f} \"
          f\"{t.get('clock', '')[:10]} {r.get('tflops') or 0:.0f}TF {r.get('pct_copy') or 0:.1f}%\")
" "$f"; done
}
