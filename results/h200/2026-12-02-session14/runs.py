"""ncu source-page reader (`ncu -i R --page source --csv --print-source sass`): runs of instructions with equal
execution counts (per-pair code of the ws kernel shows as 81920 = 20480 pairs x 4 warps at prefill H64).
usage: runs.py CSV [fraction of all executed instructions a run must reach to be printed, default 0.002]"""
import collections
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
header = rows[1]
at, text, executed = header.index("Address"), header.index("Source"), header.index("Instructions Executed")
data = [(int(r[at], 16), r[text].strip(), int(r[executed] or 0))
        for r in rows[2:] if len(r) > executed and r[at].startswith("0x")]
base, total = data[0][0], sum(d[2] for d in data)
print("total executed", total, "instructions", len(data))
runs = []
for address, source, count in data:
    words = source.split()
    op = words[1] if words and words[0].startswith("@") else (words[0] if words else "")
    if runs and runs[-1][2] == count:
        runs[-1][1] += 1
        runs[-1][3][op] += 1
    else:
        runs.append([address - base, 1, count, collections.Counter({op: 1})])
threshold = float(sys.argv[2]) if len(sys.argv) > 2 else 0.002
for offset, n, count, ops in runs:
    if n * count >= threshold * total:
        print(f"{offset:#07x} n={n:4d} exec={count:9d} sum={n * count / 1e6:7.2f}M  "
              + " ".join(f"{k}:{v}" for k, v in ops.most_common(8)))
