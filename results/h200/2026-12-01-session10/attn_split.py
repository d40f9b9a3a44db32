import sys, re
# classify the ws kernel's samples: producer range starts at the first LDGSTS-loop block after the math code
lines = [l.rstrip("\n") for l in open(sys.argv[1])]
recs = []
for l in lines:
    m = re.match(r"\s*(0x[0-9a-f]+)\s+(\d+) ex=\s*(\d+)\s+(.*)", l)
    if m: recs.append((int(m.group(1), 16), int(m.group(2)), int(m.group(3)), m.group(4)))
# producer: from the code before the first LDGSTS of the KV gather (LTC256B) back to the
# instruction after the math warps' EXIT
ld = [i for i, r in enumerate(recs) if "LTC256B" in r[3]]
p0 = ld[0]
while p0 > 0 and "USETMAXREG" not in recs[p0][3] and "EXIT" not in recs[p0 - 1][3]:
    p0 -= 1
spin0 = next(i for i, r in enumerate(recs) if i > ld[-1] and "EXIT" in r[3]) + 1
tot = sum(r[1] for r in recs)
def cls(i, r):
    s = r[3]
    if i >= p0 and i < spin0: return "producer"
    if "BRA" in s and "@!P" in s: return "math: mbarrier wait (Q/ready)"
    if "DEPBAR" in s: return "math: wgmma wait"
    if "STG" in s or "FSETP.GT.AND P0, PT, R10, -R9" in s or i > spin0 - 400 and i < p0: return "math: epilogue-ish"
    if "LDS" in s and ("0x34100" in s or "0x34000" in s): return "math: named barrier (LDS after bar)"
    if "HGMMA" in s: return "math: HGMMA issue"
    return "math: other"
agg = {}
for i, r in enumerate(recs):
    c = cls(i, r); agg[c] = agg.get(c, 0) + r[1]
print(sys.argv[1], "producer from", hex(recs[p0][0]), "samples", tot)
for k, v in sorted(agg.items(), key=lambda kv: -kv[1]): print(f"  {k:40s} {100*v/tot:5.1f}%")
