"""Summarise an ncu source-page CSV (--page source --print-source sass --csv): per-instruction warp-stall
samples. usage: sass_hot.py FILE.csv [TOP]  -> totals by stall reason, the TOP hottest instructions with
their leading stall reasons, and the full listing (address, samples, reasons) to FILE.csv.txt"""
import csv, sys
path = sys.argv[1]; top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
rows = list(csv.reader(open(path)))
hdr_i = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
hdr = rows[hdr_i]
stall_cols = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "(Not Issued)" not in h]
si = hdr.index("Source"); ai = hdr.index("Address"); ni = hdr.index("Warp Stall Sampling (All Samples)")
ex = hdr.index("Instructions Executed")
def f(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
ins = []
for r in rows[hdr_i + 1:]:
    if len(r) < len(hdr): continue
    st = {hdr[i][6:]: f(r[i]) for i in stall_cols}
    ins.append((r[ai], r[si], f(r[ni]), f(r[ex]), st))
tot = sum(x[2] for x in ins) or 1
agg = {}
for x in ins:
    for k, v in x[4].items(): agg[k] = agg.get(k, 0) + v
print(f"{path}: {len(ins)} instructions, {tot:.0f} samples")
by_reason = sorted(agg.items(), key=lambda kv: -kv[1])
print("by reason:", ", ".join(f"{k} {100*v/tot:.1f}%" for k, v in by_reason if v / tot > 0.005))
def reasons(st): return " ".join(f"{k}:{int(v)}" for k, v in sorted(st.items(), key=lambda kv: -kv[1])[:3] if v)
print(f"top {top}:")
for x in sorted(ins, key=lambda x: -x[2])[:top]:
    print(f"  {x[0]:>6} {100*x[2]/tot:5.1f}% ex={int(x[3]):>8}  {x[1][:70]:70s} {reasons(x[4])}")
with open(path + ".txt", "w") as o:
    for x in ins:
        o.write(f"{x[0]:>6} {x[2]:7.0f} ex={int(x[3]):>8}  {x[1][:90]:90s} {reasons(x[4])}\n")
