"""ncu source-page reader: warp-stall samples by opcode and the most sampled lines. usage: stalls.py CSV"""
import collections
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
header = rows[1]
at, text = header.index("Address"), header.index("Source")
sampled = header.index("Warp Stall Sampling (All Samples)")
data = [(int(r[at], 16), r[text].strip(), int(r[sampled] or 0))
        for r in rows[2:] if len(r) > sampled and r[at].startswith("0x")]
base, total = data[0][0], sum(d[2] for d in data)
print("samples", total)
by_op = collections.Counter()
for _, source, samples in data:
    words = source.split()
    op = words[1] if words[0].startswith("@") else words[0]
    by_op[op if op.startswith("SYNCS") else op.split(".")[0]] += samples
for op, samples in by_op.most_common(14):
    print(f"  {op:40s} {100 * samples / total:5.1f}%")
print("top lines")
for address, source, samples in sorted(data, key=lambda d: -d[2])[:25]:
    print(f"  {address - base:#07x} {100 * samples / total:5.1f}% {source[:70]}")
