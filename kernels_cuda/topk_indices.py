"""CUDA `topk_indices` (topk_indices.cu), routed by the tensor's width: up to FAST_COLUMNS columns
(16-byte aligned rows) one CTA a row with the row in registers (`dsv4_topk_indices_fast`); wider
tensors, and more such rows than one wave, in one launch of `dsv4_topk_indices_wide` (one CTA a row,
or a thread-block cluster of 2, 4 or 8 CTAs), which routes each row by its own seq_len on the device:
rows <= k the plain copy, rows up to SOLO_COLUMNS (within a CTA's chunk buffer) selected by the
cluster's rank 0 alone, longer ones split over the cluster, each chunk read once into shared memory
and selected with the fast kernel's coarse histogram and candidate ranking (docs/perf-notes.md,
"Top-k"). DSV4_TOPK_KERNEL (read at each call): `split` runs a wide batch's rows <= FAST_COLUMNS in
the fast kernel first and the rest in the wide kernel without the solo rows (the default before the
one-launch routing), `wide` sends every shape to the wide kernels (no fast kernel), `cluster` to the
cluster kernel with its three-digit radix, `v2` to the older register kernel. DSV4_TOPK_SOLO=0 turns
the solo rows off; DSV4_TOPK_FOLD=0 exchanges the cluster CTAs' write-out runs at a cluster barrier
instead of reading them from the peers' histograms; DSV4_TOPK_SUM=direct sums the cluster's
histograms by every CTA reading every peer's (the reduce-scatter's predecessor); DSV4_TOPK_GROUPS=0
gives every row past the solo bound the launch's whole cluster (by default the 4- and 8-CTA kernels
give it the fewest CTAs whose chunks fit the bound, WIDE_GROUPS); DSV4_TOPK_EARLY (default 1; 0 turns it off) lets a
one-wave cluster launch schedule the next kernel at its start. More rows of up to
FAST_COLUMNS than one wave of the fast kernel (256 x 16384) run `dsv4_topk_indices_half`: the fast
kernel on the fp16-rounded score's bins, its keys two a register, two CTAs an SM (docs/topk-s9a.md;
the same selection in its own order).
`topk_indices_plan` (contract section 7, once per step) gives that cluster launch a work list: rows
a rank 0 would select alone are packed one a CTA, a cluster's size to a place, instead of a place each,
and the places run longest first; long rows keep their cluster, so outputs are bitwise those of the
device routing. DSV4_TOPK_ROUTE=device (read at each call) ignores a plan's work list (the A/B).
DSV4_TOPK_LONG_PLAN (read at import; docs/topk-s11a.md): the plan also sends a long batch's wide<8> launch to
`twin` (dsv4_topk_indices_twin<4>, the default) or `wide16` where that kernel writes wide<8>'s bits (long_plan);
`off` keeps wide<8>. DSV4_TOPK_TWIN (read at each call; docs/topk-s12a.md): twin's cluster size, `auto` (the default:
from the device's max active clusters), `4` or `2` (twin<2>: wide<8>'s chunks four a CTA, one CTA an SM)."""

import functools
import math
import os

import torch

from harness import contract, plans
from kernels_cuda import _loader
from kernels_cuda._loader import launch

THREADS = 1024
CLUSTERS = (1, 2, 4, 8)  # 8 is the largest portable cluster


def wide_static_shared(cluster):
    """sizeof(WideShared<cluster>) in topk_indices.cu, cluster > 1: 34208 bytes and, from 4 CTAs, a
    slice of 16 KB / cluster (16 KB / 4 at 8: its rows may take 4 of its CTAs, WIDE_GROUPS)
    (tests/test_cuda_topk.py checks it against the compiled kernels)."""
    return 34208 + (16384 // (4 if cluster == 8 else cluster) if cluster > 2 else 16)


MAX_CHUNK = 40960  # columns one CTA keeps in shared memory (160 KB of keys + 25 KB, wide: 34 KB, static)
TWO_PER_SM_CHUNK = 20480  # up to here two CTAs can share an SM (2 x (80 + 25) KB; 32 registers x 2048 threads)
# CTAs per SM the split may count on when it doubles the cluster. The H200 run (perf-notes, top-k)
# timed 256 CTAs (two per SM) as about two waves of one CTA's latency whatever their chunk
# (64 x 16384 in chunks of 4096 = 28 us, 256 x 16384 in chunks of 16384 = 28 us, 1 x 65536 in
# 8 CTAs = 15 us), so the split counts one per SM; DSV4_TOPK_CTAS_PER_SM=2 restores the old split
# for a side-by-side run.
CTAS_PER_SM = int(os.environ.get("DSV4_TOPK_CTAS_PER_SM", "1"))
MIN_CHUNK = 4096  # below this a CTA's load is too short to be worth another CTA
# DSV4_TOPK_KERNEL=v2 (read at each call): one CTA a row, `dsv4_topk_indices_regs<VECS>`. Rows up to
# REGS_COLUMNS stay in registers (VECS float4 a thread, the fewest that hold the row; 8 spills at 64
# registers); longer rows, up to DSV4_TOPK_V2_COLUMNS (default 65536), are re-read in tiles of
# REGS_COLUMNS every pass; wider tensors keep the cluster kernel.
REGS_VECS = (1, 2, 4)
REGS_COLUMNS = 4 * THREADS * REGS_VECS[-1]
MAX_K = 4096  # the write-out stages a CTA's columns in its two 2048-bin histograms (V4 uses 512..2048)
# dsv4_topk_indices_fast<VECS>: rows up to 4096 x VECS columns in registers; VECS 1 runs two CTAs an
# SM (32 registers), VECS 2 and 4 one (40 and 57 registers on sm_90a). It stages k slots in its
# 4096-bin histogram, so k <= MAX_K holds for it too.
FAST_VECS = (1, 2, 4)
FAST_COLUMNS = 4 * THREADS * FAST_VECS[-1]
# its launch bound a VECS (FAST_CTAS_PER_SM_<VECS> in DEFINES)
FAST_CTAS_PER_SM = {1: 2, 2: 1, 4: 1}
# dsv4_topk_indices_half<VECS>: the fast kernel's selection on the coarse bins of the score rounded to
# fp16 (SGLang's binning: one conversion for two keys), its keys two a register, 32 registers and two
# CTAs an SM for every VECS; the same k, its own slot order. It takes a narrow tensor whose rows are
# more than one wave of the fast kernel: on the H200 (graph-timed medians) 256 x 16384 ran 10.9 us
# against wide1's 13.7 (k 1024: 11.5 against 14.3), while 64 x 16384 (a row alone on its SM, a latency
# chain) ran 8.4 against the fast kernel's 8.1. DSV4_TOPK_KERNEL=wide runs wide1 there (the A/B).
HALF_CTAS_PER_SM = 2
# DSV4_TOPK_FAST_CUTS (read at import: it picks the compiled code; default 1): latency cuts of the fast
# kernel's one-CTA chain (64 x 16384), bits of: 1 seq_len by a coherent load after the PDL wait (ptxas
# hoisted the read-only `seq_lens[b]` above griddepcontrol.wait: a race with a kernel before that
# writes it) and the row's loads issued before seq_len arrives, 2 the histogram without a padding
# test a key (key 0 counted in bin 0, taken out once), 4 the threshold-bin candidates ranked by warp
# votes straight into the output after the placing barrier (the same ranks; no staging, one barrier
# fewer). docs/topk-s9a.md, "64 x 16384". On the H200 (session 9, call 3) 64 x 16384 ran 7.9 us by
# default (0), 7.8 with 1 and 8.0 with 7: 1 is the default for the race, 2 and 4 stay opt-in.
# docs/topk-s11b.md (the fast kernel only): 8 one classification into above / inside bit masks and a placing
# walk over their set bits (the same slots), 16 (with 1) the row's address and predicates made before the PDL
# wait, 32 the keys past seq_len masked by vector (a test a key before). Default 63 since session 11's call 3:
# 64 x 16384 took 8.0 -> 6.7 us (SGLang 6.4; check --full and the GPU tests passing under it).
# docs/topk-s13c.md (the fast kernel only): 64 the row's page-table entries read into shared memory while the row
# loads, the write-out mapped from there (no global load after the last barrier), 128 (with 8) the bit walk's slots
# in fewer instructions (REDUX sums, one loop over a thread's mask). Default 255 since session 13's call 3: 64 x
# 16384 6.7 -> 5.9 us beside SGLang's 6.6 (check --full and the GPU tests bitwise 63's under it); 63 is session
# 11's. docs/topk-s14a.md: 256 fast<1> built without 64 (its other cuts kept; fast<2> / fast<4> keep it): the short
# batch (64 rows <= k, fast<1>'s copy path, the same copy-path SASS) ran 1.078 us at 255 in session 13. Default 511
# since session 14's call 3: the short batch 0.969 -> 0.900 / 0.907 us beside SGLang's 1.052 (check --full and the
# GPU tests bitwise 255's under it).
FAST_CUTS = int(os.environ.get("DSV4_TOPK_FAST_CUTS", "511"))
# DSV4_TOPK_HALF_CUTS (read at import; default 3): cuts of the half kernel's chain (256 x 16384), bits of
# (docs/topk-s14a.md): 1 FAST_CUTS bit 64's page-table copy in dsv4_topk_indices_half (the row's entries read into
# shared memory while the row loads, every mapping from there: no global load after the last barrier; rows of more
# than 1024 pages keep the L2 prefetch and the global mapping). The same bits out. Default 1 since session 14's call
# 3: 256 x 16384 k1024 12.01 -> 11.75 us beside SGLang's 11.92, k512 11.23 -> 10.81 / 11.12 (SGLang 11.16); 0 the A/B.
# 2 (session 22): the half kernel's histogram zeroed and its barrier passed before the PDL wait, each vector's fp16
# keys counted as its load lands (SGLang's order; FAST_CUTS bit 32's for half), not after a barrier that waits for the
# CTA's last load. The same counts, the same bits out. Default 3 since session 22's call 4 (H100, two alternating
# pairs beside SGLang): 256 x 16384 12.17 / 12.19 -> 11.39 / 11.39 us (SGLang 12.31), k1024 13.09 / 13.07 -> 12.30 /
# 12.29 (13.26); 1 is session 14's build.
HALF_CUTS = int(os.environ.get("DSV4_TOPK_HALF_CUTS", "3"))
# DSV4_TOPK_LEAN_CUTS (read at import; default 12): the lean_regs kernel's cluster chain, bits of
# (docs/topk-s11b.md): 1 the histograms summed by red.async / st.async pushes counted by mbarriers (no
# release barrier between the histograms and the threshold), 2 (with 1) the candidates to rank 0 by
# st.async and the last cluster barrier an exit guard, 4 the chunk's address and the zeroed histogram's
# barrier before the PDL wait, 8 the counting and placing walks by bit masks (FAST_CUTS bit 8's). The
# same bits out as without. Default 12 (4 + 8) since session 13's call 4 measured it with the window form: 1 x 65536
# k1024 7.1 -> 6.7 us (SGLang 7.0), k512 6.5 -> 6.6 (6.8); 1 and 2 (the pushed sums) stay opt-in, with LEAN_FORM=sums.
LEAN_CUTS = int(os.environ.get("DSV4_TOPK_LEAN_CUTS", "12"))
# DSV4_TOPK_LEAN_FORM (read at import; docs/topk-s13b.md): `window` compiles the lean_regs kernels with the row's
# threshold found from a window of the peers' bins (each CTA's own threshold bin up to the highest non-empty one)
# instead of the whole histograms' reduce-scatter, all-gather and fold (LEAN_WINDOW; the same bits out; not with
# LEAN_CUTS bit 1). The default since session 13's call 3: 1 x 65536 8.4 -> 6.7 us beside SGLang's 6.9 (check
# --full and the GPU tests under it); `sums`, session 12's build
LEAN_FORMS = ("sums", "window")
LEAN_FORM = _loader.env_choice("DSV4_TOPK_LEAN_FORM", LEAN_FORMS, "window")
if LEAN_FORM == "window" and LEAN_CUTS & 1:
    raise ValueError(f"DSV4_TOPK_LEAN_CUTS={LEAN_CUTS} pushes the sums that DSV4_TOPK_LEAN_FORM=window replaces: "
                     "set DSV4_TOPK_LEAN_FORM=sums with it")
# DSV4_TOPK_WIDE_WINDOW (read at import; default 1 since session 21, 0 the A/B; docs/topk-s14b.md): `1` compiles the
# wide kernels (wide<2/4/8>, lean<8/16>) with a row on 2 or more CTAs taking its threshold, and each CTA the counts
# before it, from a window of the peers' bins (LEAN_FORM=window's lean_window_bounds / lean_window_threshold, with the
# row's base rank) instead of the histograms' reduce-scatter, all-gather and fold: one cluster barrier and ~3 DSMEM
# round trips fewer on an 8-CTA row's chain (b64-mixed-to-262144's 262144 and 131072 rows); the same bits out. Slower
# in session 14 with the mixed batch's ~66K rows on 2 CTAs; with them on 4 (MIN_ROW_CTAS) the mixed batch 22.5 -> 20.9
# / 21.2 us on the H100 (k1024 23.0 -> 21.7 / 21.7; session 20, calls 5-6). On sm_100 wide_select is called, not
# inlined (NVRTC 13.5 spilled wide<8> under the window there).
WIDE_WINDOW = int(os.environ.get("DSV4_TOPK_WIDE_WINDOW", "1"))
if WIDE_WINDOW not in (0, 1):
    raise ValueError(f"DSV4_TOPK_WIDE_WINDOW={WIDE_WINDOW}: 0 or 1")
# DSV4_TOPK_WIDE_TABLE (read at import; default 0; docs/topk-s14b.md): `1` compiles wide<4> / wide<8> with a row that
# rank 0 (or a plan's CTA) selects alone loading its page-table entries (up to 1024 pages) while the chunk loads and
# mapping its write-out through them in shared memory (FAST_CUTS 64's cut): no L2 round trip after the last barrier,
# two of them in sequence before (the staged slots, then the ranked candidates). The same bits.
WIDE_TABLE = int(os.environ.get("DSV4_TOPK_WIDE_TABLE", "0"))
if WIDE_TABLE not in (0, 1):
    raise ValueError(f"DSV4_TOPK_WIDE_TABLE={WIDE_TABLE}: 0 or 1")
# DSV4_TOPK_TRACE (read at import; default 0; kernels_cuda/topk_trace.py): `1` compiles the wide kernels (and since
# session 22 lean_regs' ranked path) with thread 0 of every CTA stamping the time at each phase of its chain into the
# module's wide_trace array (a diagnostic build).
TRACE = int(_loader.env_choice("DSV4_TOPK_TRACE", ("0", "1"), "0"))
TRACE_CTAS, TRACE_PHASES = 8192, 10  # wide_trace[CTA][phase][(ns, cycles)]: 9 phases, then 1 + the SM (160 B a CTA)
# A row of seq_len <= SOLO_COLUMNS (and within the chunk buffer) in a cluster launch is selected by
# rank 0 alone (no cluster barrier; the other CTAs exit at once): rows the fast kernel would take.
SOLO_COLUMNS = 16384
# DSV4_TOPK_MIN_ROW_CTAS (read at import; default 4 since session 20, 2 the A/B): the fewest CTAs a row past the solo
# bound takes in a WIDE_GROUPS launch of 4 or 8 CTAs (row_ctas). At 4 the mixed bench batch's ~66K rows run on 4 CTAs
# of ~16.5K columns instead of 2 of ~33K (18 places, not 17): on the H100 (session 20, call 4) 23.2 / 23.0 -> 22.4 /
# 22.5 us (k 1024 23.7 / 23.9 -> 23.3 / 22.8) beside SGLang's 23.1 (23.5). Only mixed batches have such rows (a
# uniform batch of them runs wide<2>). wide16 keeps 2 (WIDE16_MIN_ROW_CTAS: its SASS at 32 registers as it was).
MIN_ROW_CTAS = int(_loader.env_choice("DSV4_TOPK_MIN_ROW_CTAS", ("2", "4"), "4"))
WIDE16_MIN_ROW_CTAS = 2
# DSV4_TOPK_SHORT (read at each call; default 1, 0 the A/B): a call whose plan has every row <= k copies the plan's
# `short` output (short_output: metadata only, made by the planner) with dsv4_topk_indices_copy, COPY_THREADS a CTA and
# 16 bytes a thread, its loads before the PDL wait, instead of running the shape's kernel (whose copy path reads
# seq_len, then the page-table entries, after it)
COPY_THREADS = 256
# the wide kernels' options (bits of their last argument)
WIDE_FOLD, WIDE_DIRECT_SUM, WIDE_GROUPS, WIDE_EARLY = 1, 2, 4, 8
# DSV4_TOPK_LEAN (read at import; default 8r, 0 = off: wide<8> as before): a few long rows (1 x 65536) in
# dsv4_topk_indices_lean<8 or 16>, where the default runs wide<8> in one wave: one copy of the 8-CTA
# selection (wide<8> carries four, 14016 SASS instructions, for a chain that runs once cold), or 16
# CTAs a row (a non-portable cluster: chunks of 4096 at 65536). `16r` / `8r`:
# dsv4_topk_indices_lean_regs<16, 1> / <8, 2>, the row with each CTA's chunk in registers (1 or 2
# 16-byte groups a thread: aligned rows, chunks <= 4096 x VECS; else lean<16> / lean<8>).
# docs/topk-s10a.md. Rows: batch x 8 or 16 <= the SMs, and at 16 at most LEAN16_ROWS (a 16-CTA
# cluster needs 16 free SMs of one GPC). On the H200 (session 10, call 2; 1 x 65536 k 512 / k 1024, us):
# wide<8> 9.7 / 10.3, lean 8 9.3 / 9.8, 16 11.0 / 11.4, 16r 9.1 / 9.5, 8r 8.7 / 9.3: 8r is the default.
LEAN = os.environ.get("DSV4_TOPK_LEAN", "8r")
LEAN_CLUSTERS = (8, 16)
LEAN16_ROWS = 4
LEAN_REGS = {"16r": (16, 1), "8r": (8, 2)}  # cluster, 16-byte groups a thread
# the lean_regs instantiations (_loader.KERNELS compiles them): LEAN_REGS's and PAIRS's <2, 2>
LEAN_REGS_KERNELS = [f"dsv4_topk_indices_lean_regs<{c}, {v}>" for c, v in [*LEAN_REGS.values(), (2, 2)]]
# DSV4_TOPK_PAIRS=1 (read at import; opt-in): a narrow aligned tensor of 8193..16384 columns whose
# rows fit one wave of pairs (64 x 16384: 128 CTAs) runs dsv4_topk_indices_lean_regs<2, 2> (a 2-CTA
# cluster a row, 8192 columns in registers a CTA) instead of fast<4> (one CTA, 16384 a row).
PAIRS = os.environ.get("DSV4_TOPK_PAIRS", "0") == "1"
NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cuda.h)
# Groups of 4 columns a thread whose keys' bits the wide kernel's counting walk keeps for its placing
# walk, by cluster size: wide1 4 (one register at its 32), the one-CTA-an-SM clusters 8 (two of their
# 64: chunks of 32768 whole).
WIDE_KEPT_GROUPS = {1: 4, 2: 8, 4: 8, 8: 8}

# topk_indices.cu's compile-time constants: defined above only, passed by the loader as -D options
DEFINES = {"TOPK_THREADS": THREADS, "MAX_K": MAX_K, "MAX_CHUNK": MAX_CHUNK, "WIDE_FOLD": WIDE_FOLD,
           "WIDE_DIRECT_SUM": WIDE_DIRECT_SUM, "WIDE_GROUPS": WIDE_GROUPS, "WIDE_EARLY": WIDE_EARLY,
           **{f"WIDE_KEPT_GROUPS_{c}": g for c, g in WIDE_KEPT_GROUPS.items()},
           **{f"FAST_CTAS_PER_SM_{v}": FAST_CTAS_PER_SM[v] for v in FAST_VECS}, "FAST_CUTS": FAST_CUTS,
            "HALF_CUTS": HALF_CUTS, "LEAN_CUTS": LEAN_CUTS, "LEAN_WINDOW": int(LEAN_FORM == "window"),
            "WIDE_WINDOW": WIDE_WINDOW, "WIDE_TABLE": WIDE_TABLE,
            "WIDE_TRACE": TRACE, "WIDE_TRACE_CTAS": TRACE_CTAS, "WIDE_TRACE_PHASES": TRACE_PHASES,
           "WIDE_MIN_ROW_CTAS": MIN_ROW_CTAS, "WIDE16_MIN_ROW_CTAS": WIDE16_MIN_ROW_CTAS, "COPY_THREADS": COPY_THREADS}
# the kernels' parameters, checked by the loader's launch()
_PARAMS = ("ptr logits", "i64 columns", "ptr seq_lens", "ptr page_table", "i64 table_stride", "ptr out", "i32 k",
           "i32 page_size")
_SKIP = (*_PARAMS, "i32 skip_up_to")
SIGNATURES = {"dsv4_topk_indices": _SKIP, "dsv4_topk_indices_cluster": _SKIP, "dsv4_topk_indices_regs": _PARAMS,
              "dsv4_topk_indices_fast": (*_PARAMS, "i32 pdl"), "dsv4_topk_indices_half": (*_PARAMS, "i32 pdl"),
              "dsv4_topk_indices_wide1": (*_SKIP, "i32 solo_up_to", "i32 options"),
              "dsv4_topk_indices_wide": (*_SKIP, "i32 solo_up_to", "i32 options", "ptr work"),
              "dsv4_topk_indices_lean": (*_PARAMS, "i32 options"),
              "dsv4_topk_indices_lean_regs": (*_PARAMS, "i32 options")}
SIGNATURES["dsv4_topk_indices_wide16"] = SIGNATURES["dsv4_topk_indices_wide"]
SIGNATURES["dsv4_topk_indices_copy"] = ("ptr rows", "ptr out", "i32 vectors")

# DSV4_TOPK_LONG=wide16 (opt-in, read at each call as DSV4_TOPK_EARLY): a cluster launch of 8 CTAs a row
# over many rows past LONG_MIN_COLUMNS runs `dsv4_topk_indices_wide16<8>` instead of wide<8>: the same
# selection with 16-bit keys in shared memory, two CTAs an SM (docs/topk-s10b.md). Its chunk buffer
# holds WIDE16_CHUNK columns (72 KB: 2 x (72 KB + WideShared<8>'s 37.4 KB + 1 KB) <= 228 KB an SM),
# which is also its solo and groups bound (the wide kernel's MAX_CHUNK). DSV4_TOPK_LONG=wide16-prefetch:
# the same kernel, each CTA first bulk-prefetching its chunk into L2 (option WIDE16_PREFETCH; the same bits).
LONG_CHOICES = ("", "wide16", "wide16-prefetch")
WIDE16_CHUNK = 36864
WIDE16_PREFETCH = 16
DEFINES.update(WIDE16_CHUNK=WIDE16_CHUNK, WIDE16_PREFETCH=WIDE16_PREFETCH)
WIDE16_CTAS_PER_SM = 2
LONG_MIN_COLUMNS = 131072

# DSV4_TOPK_LONG_PLAN (read at import; default twin since session 11's call 3: 64 x 262144 68.6 -> 64.0 us beside
# SGLang's 54.5, the mixed batch unchanged; `off` for the A/B; docs/topk-s11a.md): topk_indices_plan, which knows
# the lengths, sends a long batch's wide<8> launch (the width's routing) to another kernel where that kernel
# writes wide<8>'s bits on every row, so the planned call is bitwise the unplanned one (contract section 7).
# Long: the CTAs of the rows past the solo bound are more than one an SM (64 x 262144: 512; the mixed bench
# batch, 84, stays on wide<8>). `wide16`: wide16<8> where every row takes the same CTAs at both kernels'
# bounds. `twin`: dsv4_topk_indices_twin<4> where every row is a copy or on all 8 of wide<8>'s CTAs. A call
# without a plan, or DSV4_TOPK_ROUTE=device, routes as before.
LONG_PLAN_CHOICES = ("", "wide16", "twin")
LONG_PLAN = os.environ.get("DSV4_TOPK_LONG_PLAN", "twin").replace("off", "")
TWIN_KERNEL = "dsv4_topk_indices_twin<4>"
TWIN_CTAS_PER_SM = 2
# DSV4_TOPK_TWIN (read at each call; docs/topk-s12a.md): twin's cluster size. A 4-CTA cluster must sit in one GPC,
# so the H200 holds 62 of twin<4>'s at once (the lead's ncu: 64 x 262144 ran as 62 rows, then 2); twin<2> (wide<8>'s
# chunks four a CTA, one CTA an SM: 2-CTA clusters, one a TPC) holds 66. `auto` (default since session 12's call 1
# checked it: 43/43 and twin<2> bitwise wide<8>): the one with the fewer rounds at the device's max active clusters
# (cuOccupancyMaxActiveClusters; H200 {4: 62, 2: 66}), 4 at a tie; `4` or `2` force one.
TWIN_CHOICES = ("4", "2", "auto")
# DSV4_TOPK_TWIN_FORM (read at import; docs/topk-s13a.md): `onewalk` (the default since session 13's call 1: 64 x
# 262144 52.5 -> 38.6 us on the H200, twin<2> bitwise wide<8>) compiles twin<2> with its counting walks and placing
# walks each one pass over its four chunks (TWIN_ONE_WALK); `onewalk8` that and 8 float4 loads a thread in its load
# loop (TWIN_LOADS_2) instead of 4 (39.6); `chunks`, the walks a chunk and 4 loads (session 12's form)
TWIN_FORMS = ("chunks", "onewalk", "onewalk8")
TWIN_FORM = _loader.env_choice("DSV4_TOPK_TWIN_FORM", TWIN_FORMS, "onewalk")
DEFINES["TWIN_ONE_WALK"] = int(TWIN_FORM != "chunks")
DEFINES["TWIN_LOADS_2"] = 8 if TWIN_FORM == "onewalk8" else 4
TWIN_KERNELS = {4: TWIN_KERNEL, 2: "dsv4_topk_indices_twin<2>"}
TWIN_CTAS_PER_SM_OF = {4: TWIN_CTAS_PER_SM, 2: 1}
SIGNATURES["dsv4_topk_indices_twin"] = SIGNATURES["dsv4_topk_indices_lean"]


def chunk_columns(columns, cluster):
    """Columns of a row one CTA holds, as the kernel splits it (a multiple of 4)."""
    return (-(-columns // cluster) + 3) & ~3


def cluster_size(batch, columns, sms, clusters=CLUSTERS, ctas_per_sm=None):
    """CTAs per row: the fewest whose chunks fit shared memory, doubled while all CTAs are still
    resident at once (one per SM, or two when ctas_per_sm allows and the chunk's shared memory
    fits twice) and the chunks stay long enough, up to the largest in `clusters`."""
    fitting = [c for c in clusters if chunk_columns(columns, c) <= MAX_CHUNK]
    if not fitting:
        raise ValueError(f"topk_indices (CUDA): rows of {columns} columns exceed {clusters[-1] * MAX_CHUNK} "
                         f"on this GPU (thread-block clusters need sm_90+)")
    cluster = fitting[0]
    while cluster < clusters[-1]:
        chunk = chunk_columns(columns, cluster * 2)
        per_sm = CTAS_PER_SM if ctas_per_sm is None else ctas_per_sm
        resident = sms * (2 if per_sm >= 2 and chunk <= TWO_PER_SM_CHUNK else 1)
        if batch * cluster * 2 > resident or chunk < MIN_CHUNK:
            break
        cluster *= 2
    return cluster


@functools.lru_cache(maxsize=None)
def _device(device_index):
    """(SMs, the cluster sizes the GPU runs): clusters are sm_90+."""
    props = torch.cuda.get_device_properties(device_index)
    clusters = CLUSTERS if props.major >= 9 else CLUSTERS[:1]
    return props.multi_processor_count, clusters


def fast_launch(batch, columns, sms):
    """The fast kernel for `batch` rows of `columns` (<= FAST_COLUMNS) columns: (kernel, pdl). Its default
    form while the grid is one wave of it, else the half form (two CTAs an SM); PDL when the grid is
    one wave (it waits before reading). A function of the shape only, so a plan never changes it."""
    vecs = next((v for v in FAST_VECS if 4 * THREADS * v >= columns), FAST_VECS[-1])
    if batch <= FAST_CTAS_PER_SM[vecs] * sms:
        return f"dsv4_topk_indices_fast<{vecs}>", True
    return f"dsv4_topk_indices_half<{vecs}>", batch <= HALF_CTAS_PER_SM * sms


def _opt_in(kernel, shared, device):
    """The kernel's static shared memory (histograms, 16-24 KB) counts against the 48 KB a launch
    gets without the opt-in, so the dynamic part needs it from 48 KB minus that, not from 48 KB
    (the loader opts in above 48 KB of dynamic only: chunks of 6000-12000 columns failed to launch)."""
    fn = _loader.kernel("topk_indices.cu", kernel, device)
    if _done(_opted, fn, shared):
        return
    _loader._opt_in_shared(fn, shared)
    _opted[fn.ptr] = (fn, shared)


def _done(registry, fn, at_least=0):
    """Whether kernel `fn` is set up in `registry` (pointer -> (the function, its setting)). The entry must be that
    very function: a module the loader loads again (its caches cleared, as a test that rebuilds under other defines
    does) can get a freed kernel pointer back, and a stale entry left session 11's 16-CTA launch without its
    non-portable cluster attribute (CUDA_ERROR_INVALID_CLUSTER_SIZE). The entry keeps its function alive too."""
    entry = registry.get(fn.ptr)
    return entry is not None and entry[0] is fn and entry[1] >= at_least


_opted = {}  # kernel pointer -> (function, dynamic shared memory it is opted in for)


def _two_per_sm(kernel, device):
    """A kernel the host runs two CTAs an SM (wide1) asks for the largest shared-memory carveout (the
    driver's own pick is a hint it may size for one CTA); once per kernel (a driver attribute)."""
    fn = _loader.kernel("topk_indices.cu", kernel, device)
    if not _done(_attributes_set, fn):
        from cupy_backends.cuda.api import driver
        try:  # a hint: a driver that refuses it leaves the kernel as it was
            driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100)
        except driver.CUDADriverError:
            pass
        _attributes_set[fn.ptr] = (fn, 0)


_attributes_set = {}  # kernel pointer -> (function, 0): the ones _two_per_sm has set up


def _non_portable(kernel, device):
    """A 16-CTA cluster kernel (lean<16>, lean_regs<16, 1>) opts in to the non-portable cluster size;
    once per kernel."""
    fn = _loader.kernel("topk_indices.cu", kernel, device)
    if not _done(_non_portable_set, fn):
        from cupy_backends.cuda.api import driver
        driver.funcSetAttribute(fn.ptr, NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        _non_portable_set[fn.ptr] = (fn, 0)


_non_portable_set = {}  # kernel pointer -> (function, 0): the ones _non_portable has set up


def row_ctas(n, cluster, up_to, least=None):
    """CTAs of a row of seq_len n past `up_to` in a WIDE_GROUPS launch of `cluster` CTAs (row_ctas in
    topk_indices.cu): the fewest, a power of two from `least` (MIN_ROW_CTAS unless given; wide16's is
    WIDE16_MIN_ROW_CTAS) up to cluster, whose chunks are <= up_to."""
    c = min(MIN_ROW_CTAS if least is None else least, cluster)
    while c < cluster and chunk_columns(n, c) > up_to:
        c *= 2
    return c


def wide8_row_ctas(n, k, up_to, least=None):
    """topk_row_wide<8>'s (or, with wide16's bound and least, topk_row_wide16<8>'s) CTAs of a row of seq_len n in a
    WIDE_GROUPS launch: 0 a copy, 1 rank 0 alone, else row_ctas."""
    return 0 if n <= k else 1 if n <= up_to else row_ctas(n, 8, up_to, least)


def groups_up_to(batch, columns, cluster, sms, clusters):
    """The longest chunk a WIDE_GROUPS launch gives a row's CTA (its solo bound too): MAX_CHUNK where the
    grid is more than a wave and its cluster size the fewest whose chunks fit (as few CTAs a row as the
    chunk buffer allows, so more rows run at once), else the launch's own chunk (a grid of one wave, or
    rows split further for latency, keep chunks no longer than the widest row's: 1 x 65536 stays on 8
    CTAs of 8192)."""
    fewest = next(c for c in clusters if chunk_columns(columns, c) <= MAX_CHUNK)
    return MAX_CHUNK if cluster == fewest and batch * cluster > sms else chunk_columns(columns, cluster)


def lean_launch(batch, columns, aligned, sms, lean, early):
    """The lean kernel's launch for `batch` rows of `columns` that the default would give one wave of
    wide<8>, or None: lean (DSV4_TOPK_LEAN) "8" or "16" CTAs a row, one wave of them (and at 16 at most
    LEAN16_ROWS rows), "16r" / "8r" the registers' form where its chunk fits (aligned rows), else as
    "16" / "8"; early: DSV4_TOPK_EARLY (WIDE_EARLY; the grid is one wave)."""
    cluster, vecs = LEAN_REGS.get(lean, (int(lean) if lean in ("8", "16") else 0, 0))
    if cluster not in LEAN_CLUSTERS or batch * cluster > sms or (cluster == 16 and batch > LEAN16_ROWS):
        return None
    options = (WIDE_EARLY if early else 0,)
    if vecs and aligned and chunk_columns(columns, cluster) <= 4 * THREADS * vecs:
        return f"dsv4_topk_indices_lean_regs<{cluster}, {vecs}>", (cluster, batch), 0, True, options
    shared = 4 * (chunk_columns(columns, cluster) + 4)
    return f"dsv4_topk_indices_lean<{cluster}>", (cluster, batch), shared, True, options


def launches(batch, columns, aligned, sms, clusters, choice="fast", solo=SOLO_COLUMNS, fold=True, direct_sum=False,
             groups=True, groups_bound=0, early=False, lean="0", pairs=False, long=""):
    """The kernels one call runs, in order: [(kernel, grid, shared memory bytes, pdl, extra)], extra
    being the arguments after the common ones: (pdl,) for the fast kernel, (skip_up_to, solo_up_to,
    options) for the wide kernels (WIDE_FOLD | WIDE_DIRECT_SUM), (skip_up_to,) for the cluster
    kernels, () for v2. aligned: rows start 16-byte aligned; sms, clusters: as _device; choice,
    solo, fold, direct_sum, groups, groups_bound, early: the DSV4_TOPK_KERNEL,
    DSV4_TOPK_SOLO (columns; 0 = off), DSV4_TOPK_FOLD, DSV4_TOPK_SUM,
    DSV4_TOPK_GROUPS, DSV4_TOPK_GROUPS_BOUND and DSV4_TOPK_EARLY settings (groups, the default: rows
    sized by their length in the 4- and 8-CTA kernels, WIDE_GROUPS, needs solo rows on; groups_bound:
    the groups' bound in columns instead of groups_up_to's, at most MAX_CHUNK, 0 = groups_up_to's;
    early, opt-in: a one-wave cluster launch, made with PDL, lets the next kernel be scheduled at its
    start, WIDE_EARLY); lean, DSV4_TOPK_LEAN (opt-in, "0" off): the default's one wave of wide<8> runs
    lean_launch's kernel instead where that gives one; pairs, DSV4_TOPK_PAIRS (opt-in): one wave of
    narrow rows of 8193..16384 columns on lean_regs<2, 2> instead of fast<4>; long: DSV4_TOPK_LONG (`wide16`,
    `wide16-prefetch`: wide16_launch where it applies)."""
    narrow = columns <= FAST_COLUMNS
    runs, skip_up_to = [], -1
    if (pairs and aligned and choice == "fast" and FAST_COLUMNS // 2 < columns <= FAST_COLUMNS
            and 2 * batch <= sms and len(clusters) > 1):  # DSV4_TOPK_PAIRS (opt-in): a pair a row, one wave
        return [("dsv4_topk_indices_lean_regs<2, 2>", (2, batch), 0, True, (0,))]
    if aligned and ((choice == "fast" and narrow) or choice == "split"):
        # Up to FAST_COLUMNS wide: every row here. Wider (split only): rows of seq_len <= FAST_COLUMNS
        # here and the rest in the wide kernel launched next (both read seq_lens on the device, so a
        # mixed batch needs no host sync).
        kernel, pdl = fast_launch(batch, columns, sms)
        runs.append((kernel, (batch,), 0, pdl, (int(pdl),)))
        if narrow:
            return runs
        skip_up_to = FAST_COLUMNS
    if choice == "v2" and columns <= int(os.environ.get("DSV4_TOPK_V2_COLUMNS", "65536")):
        vecs = next((v for v in REGS_VECS if 4 * THREADS * v >= columns), REGS_VECS[-1])
        return [(f"dsv4_topk_indices_regs<{vecs}>", (batch,), 0, False, ())]
    if choice not in ("fast", "split", "wide"):  # the cluster kernel and its three-digit radix (up to 8 CTAs)
        cluster = cluster_size(batch, columns, sms, clusters)
        kernel = "dsv4_topk_indices" if cluster == 1 else f"dsv4_topk_indices_cluster<{cluster}>"
        return runs + [(kernel, (cluster, batch), 4 * (chunk_columns(columns, cluster) + 4), False, (skip_up_to,))]
    cluster = cluster_size(batch, columns, sms, clusters)
    if lean != "0" and choice == "fast" and cluster == 8 and batch * cluster <= sms and solo > 0 and groups:
        run = lean_launch(batch, columns, aligned, sms, lean, early)  # the default's wide<8>, one wave (opt-in)
        if run is not None:
            return runs + [run]
    chunk = chunk_columns(columns, cluster)
    shared = 4 * (chunk + 4)  # keys + up to 3 words of alignment shift
    # the fast kernel's selection on the cluster kernel's chunks; rank 0 alone on rows up to solo_up_to
    # (never past its chunk buffer; the split path leaves them to the fast kernel)
    kernel = "dsv4_topk_indices_wide1" if cluster == 1 else f"dsv4_topk_indices_wide<{cluster}>"
    solo_up_to = min(solo, chunk) if cluster > 1 and choice != "split" and solo > 0 else -1
    options = WIDE_FOLD * fold | WIDE_DIRECT_SUM * direct_sum
    if groups and solo_up_to > 0:
        # rows up to groups_up_to alone, longer ones on the fewest CTAs whose chunks fit that bound; the
        # chunk buffer holds the longest (a chunk of the widest row, or the bound)
        solo_up_to = (min(MAX_CHUNK, groups_bound) & ~3 if groups_bound > 0
                      else groups_up_to(batch, columns, cluster, sms, clusters))
        shared = 4 * (max(chunk, solo_up_to) + 4)
        options |= WIDE_GROUPS
    # after the fast kernel (split), or a grid of one wave: scheduled while the kernel before runs
    # (it waits before reading)
    pdl = bool(runs) or batch * cluster <= sms
    if early and batch * cluster <= sms and cluster > 1:  # one wave: nothing waits for its SMs
        options |= WIDE_EARLY
    if long not in LONG_CHOICES:
        raise ValueError(f"DSV4_TOPK_LONG={long!r}: one of {', '.join(LONG_CHOICES[1:])} (or unset)")
    if long and not runs and kernel == "dsv4_topk_indices_wide<8>":
        wide16 = wide16_launch(batch, columns, aligned, sms, options | WIDE16_PREFETCH * (long == "wide16-prefetch"),
                               groups_bound)
        if wide16 is not None:
            return [wide16]
    extra = (skip_up_to, solo_up_to, options) + ((None,) if cluster > 1 else ())  # work: none (device routing)
    return runs + [(kernel, (cluster, batch), shared, pdl, extra)]


def wide16_launch(batch, columns, aligned, sms, options, groups_bound):
    """The wide16 launch that replaces a wide<8> launch of `options` (which must size rows by length,
    WIDE_GROUPS, with the default bound, and sum by reduce-scatter), or None where it does not apply:
    rows 16-byte aligned, wider than LONG_MIN_COLUMNS, chunks within WIDE16_CHUNK, and more CTAs than
    one an SM (fewer rows run one CTA an SM already). Its rows <= WIDE16_CHUNK go to rank 0 alone,
    longer ones to row_ctas(n, 8, WIDE16_CHUNK, WIDE16_MIN_ROW_CTAS) CTAs; the shared memory holds 2 bytes a column."""
    cluster = 8
    chunk = chunk_columns(columns, cluster)
    if (not aligned or columns <= LONG_MIN_COLUMNS or chunk > WIDE16_CHUNK or batch * cluster <= sms
            or not options & WIDE_GROUPS or options & WIDE_DIRECT_SUM or groups_bound):
        return None
    shared = 8 * ((max(chunk, WIDE16_CHUNK) + 3) // 4)  # groups of four 16-bit keys
    pdl = batch * cluster <= WIDE16_CTAS_PER_SM * sms  # a grid of one wave (two CTAs an SM) overlaps the kernel before
    options &= ~WIDE_EARLY
    return (f"dsv4_topk_indices_wide16<{cluster}>", (cluster, batch), shared, pdl, (-1, WIDE16_CHUNK, options, None))


def twin_launch(batch, columns, aligned, sms, options, cluster=4):
    """The twin launch that replaces a wide<8> launch of `options` for a plan's batch (long_plan), or None
    where it does not apply (rows not 16-byte aligned, or wide<8>'s chunk past MAX_CHUNK): a `cluster`-CTA
    cluster a row (4 or 2), CTA p on wide<8>'s chunks c p .. c p + c - 1 (c = 8 / cluster), one 16-bit word
    a group of four of its columns in shared memory (the group's largest key's high half)."""
    chunk = chunk_columns(columns, 8)
    if not aligned or chunk > MAX_CHUNK:
        return None
    shared = 2 * (8 // cluster * chunk // 4)  # 2 bytes a group of 4 columns (chunk is a multiple of 4)
    # one round overlaps the kernel before (it waits before reading)
    pdl = batch * cluster <= TWIN_CTAS_PER_SM_OF[cluster] * sms
    return TWIN_KERNELS[cluster], (cluster, batch), shared, pdl, (options & WIDE_FOLD,)


def twin_cluster(batch, active, choice):
    """twin's cluster size for `batch` rows: DSV4_TOPK_TWIN's `4` or `2`, or for `auto` the one whose rows take
    the fewer rounds at `active` ({cluster: the device's max active clusters of that twin kernel}, 0 or None
    where unknown), 4 at a tie (one round of 62 rows at 4 on the H200, one of 66 at 2: 63-66 rows take twin<2>;
    more rows than both hold keep twin<4> unless twin<2> takes fewer rounds)."""
    if choice not in TWIN_CHOICES:
        raise ValueError(f"DSV4_TOPK_TWIN={choice!r}: one of {', '.join(TWIN_CHOICES)}")
    if choice != "auto":
        return int(choice)
    rounds = {c: -(-batch // active[c]) if active.get(c) else math.inf for c in TWIN_KERNELS}
    return 2 if rounds[2] < rounds[4] else 4


def twin_run(batch, columns, aligned, sms, options, choice, active):
    """The twin launch for a plan's batch at DSV4_TOPK_TWIN's `choice` (twin_cluster), or None (twin_launch);
    active(kernel, shared): the device's max active clusters of that kernel at that dynamic shared memory, asked
    only for `auto`."""
    runs = {c: twin_launch(batch, columns, aligned, sms, options, c) for c in TWIN_KERNELS}
    if runs[4] is None:
        return None
    counts = {c: active(run[0], run[2]) for c, run in runs.items()} if choice == "auto" else {}
    return runs[twin_cluster(batch, counts, choice)]


@functools.lru_cache(maxsize=None)
def _max_active_clusters(kernel, shared, device_index):
    """cuOccupancyMaxActiveClusters of a twin kernel (its cluster size compiled in) at `shared` bytes of dynamic
    shared memory, after the opt-in and carveout its launches get; 0 where the driver does not answer. Once per
    (kernel, shared memory, device)."""
    device = torch.device("cuda", device_index)
    _opt_in(kernel, shared, device)
    _two_per_sm(kernel, device)
    cluster = next(c for c, name in TWIN_KERNELS.items() if name == kernel)
    return _loader.max_active_clusters("topk_indices.cu", kernel, device, cluster, (THREADS,), shared)


# ---------------------------------------------------------------------------------------------
# The plan (contract section 7): a cluster launch's work list, made from seq_lens once per step.
# Without one, cluster y takes row y: a row <= solo_up_to keeps a whole cluster's place for rank 0
# alone (64 rows mixed to 262144: 64 places of 8 CTAs). The plan packs those rows one a CTA (8 to a
# place: 35 places), keeps each long row's cluster as it was, and orders the places longest first
# (docs/perf-notes.md, "Seventh session: top-k rows of mixed lengths"): the same kernel, cluster
# size and per-row code, so the same bits. By default (DSV4_TOPK_GROUPS) a long row takes row_ctas CTAs
# (2, 4 or 8 by its length, as the device routing gives it), and rows of the same count share a
# place (docs/topk-s9b.md). DSV4_TOPK_ROUTE=device (read at each call) ignores a plan's work list:
# the A/B switch.


# the cluster launches a plan's work list is made for: the wide kernels and wide16 (the same routing of
# rows; their solo bounds differ, so a plan made for one never fits a call that routes to the other)
PLANNED_KERNELS = ("dsv4_topk_indices_wide<", "dsv4_topk_indices_wide16<")


def work_list(lens, cluster, solo_up_to, k, groups=False, least=None):
    """The plan's [places, cluster] rows (-1: none). A row takes c CTAs: 1 up to max(solo_up_to, k),
    else the cluster (row_ctas with `groups`); rows of the same c are packed cluster / c a place, c
    consecutive entries each (a long row at 8 of 8 fills its place), longest first; places in
    decreasing order of the columns one of their CTAs holds (a row's chunk at its c, a solo row's
    length, 0 for a copy; ties by first row), so the longest finish under the rest (longest
    processing time first; every place pays the same fixed chain). least: row_ctas's (the kernel's)."""
    alone = max(solo_up_to, k)
    lens = [int(n) for n in lens]
    by_ctas = {}  # c -> [(columns a CTA holds, row)]
    for b, n in enumerate(lens):
        c = 1 if n <= alone else row_ctas(n, cluster, solo_up_to, least) if groups else cluster
        by_ctas.setdefault(c, []).append((chunk_columns(n, c) if c > 1 else n if n > k else 0, b))
    places = []
    for c, rows in by_ctas.items():
        rows.sort(key=lambda r: (-r[0], -lens[r[1]], r[1]))
        for i in range(0, len(rows), cluster // c):
            pack = [b for _, b in rows[i:i + cluster // c] for _ in range(c)]
            places.append((rows[i][0], pack + [-1] * (cluster - len(pack))))
    places.sort(key=lambda p: (-p[0], min(b for b in p[1] if b >= 0)))
    return [rows for _, rows in places]


def _launches_from_env(batch, columns, aligned, sms, clusters, env):
    """launches() with the DSV4_TOPK_* settings of `env` (read at each call)."""
    return launches(batch, columns, aligned, sms, clusters, choice=env.get("DSV4_TOPK_KERNEL", "fast"),
                    solo=int(env.get("DSV4_TOPK_SOLO", str(SOLO_COLUMNS))),
                    fold=env.get("DSV4_TOPK_FOLD", "1") != "0",
                    direct_sum=env.get("DSV4_TOPK_SUM", "scatter") == "direct",
                    groups=env.get("DSV4_TOPK_GROUPS", "1") != "0",
                    groups_bound=int(env.get("DSV4_TOPK_GROUPS_BOUND", "0")),
                    early=env.get("DSV4_TOPK_EARLY", "1") == "1", lean=LEAN, pairs=PAIRS,
                    long=env.get("DSV4_TOPK_LONG", ""))


def plan_route(lens, k, sms, clusters, env=os.environ):
    """The cluster launch that a call on rows of these lengths makes when its logits are as wide as
    the longest row, and its work list: ((cluster, solo_up_to, groups), rows), or None where that call is
    no single cluster launch (narrow rows, split, the older kernels: nothing to pack); groups: the
    launch sizes rows by their length (WIDE_GROUPS)."""
    if not len(lens):
        return None
    runs = _launches_from_env(len(lens), max(max(lens), 1), True, sms, clusters, env)
    if len(runs) != 1 or not runs[0][0].startswith(PLANNED_KERNELS):
        return None
    _, (cluster, _), _, _, (skip_up_to, solo_up_to, options, _) = runs[0]
    if skip_up_to != -1:
        return None
    groups = bool(options & WIDE_GROUPS)
    least = WIDE16_MIN_ROW_CTAS if runs[0][0].startswith("dsv4_topk_indices_wide16<") else None
    return (cluster, solo_up_to, groups), work_list(lens, cluster, solo_up_to, k, groups, least)


def long_plan(lens, k, sms, clusters, choice=None, env=os.environ):
    """DSV4_TOPK_LONG_PLAN's decision for a plan of rows of these lengths: (choice, the skip bound, solo bound
    and options of the wide<8> launch the call makes when its logits are as wide as the longest row), or
    None where that launch stays: no choice, no such launch, a batch that is not long (the CTAs of its rows
    past the solo bound at most one an SM), or a row the chosen kernel would give other CTAs than wide<8>
    (then its bits could differ). choice: DSV4_TOPK_LONG_PLAN's (LONG_PLAN) unless given."""
    choice = LONG_PLAN if choice is None else choice
    if choice not in LONG_PLAN_CHOICES:
        raise ValueError(f"DSV4_TOPK_LONG_PLAN={choice!r}: one of {', '.join(LONG_PLAN_CHOICES[1:])} (or off)")
    if not choice or not len(lens):
        return None
    runs = _launches_from_env(len(lens), max(max(lens), 1), True, sms, clusters, env)
    if len(runs) != 1 or runs[0][0] != "dsv4_topk_indices_wide<8>":
        return None
    skip_up_to, solo_up_to, options, _ = runs[0][4]
    if skip_up_to != -1 or solo_up_to != MAX_CHUNK or not options & WIDE_GROUPS or options & WIDE_DIRECT_SUM:
        return None  # (the default's launch only: the groups' bound, the reduce-scatter)
    wide = [wide8_row_ctas(int(n), k, solo_up_to) for n in lens]
    if sum(c for c in wide if c > 1) <= sms:
        return None
    if choice == "wide16" and any(wide8_row_ctas(int(n), k, WIDE16_CHUNK, WIDE16_MIN_ROW_CTAS) != c
                                  for n, c in zip(lens, wide)):
        return None
    if choice == "twin" and any(c not in (0, 8) for c in wide):
        return None
    return choice, (skip_up_to, solo_up_to, options)


def _metadata(seq_lens, page_table, k, page_size):
    return {"k": k, "page_size": page_size}, {"seq_lens": seq_lens, "page_table": page_table}


def topk_indices_plan(seq_lens, page_table, *, k=512, page_size=64, validate=True):
    """contract section 7's planner: the cluster launch's work list (see work_list) on seq_lens' device,
    for the launch a call makes when its logits are as wide as the longest row; a call whose width
    gives another cluster size or solo bound routes on the device as without a plan (same bits)."""
    contract.check_topk_metadata(seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    scalars, metadata = _metadata(seq_lens, page_table, k, page_size)
    plan = plans.make_plan("topk_indices", seq_lens.device, scalars, metadata)
    lens = plan.metadata["seq_lens"].values.tolist()  # the plan's host copy: one synchronisation
    # CPU metadata plans for the current GPU (none: nothing to route, the calls route on the device)
    device_index = (plan.device.index if plan.device.type == "cuda"
                    else torch.cuda.current_device() if torch.cuda.is_available() else None)
    route = plan_route(lens, k, *_device(device_index)) if device_index is not None else None
    if route is not None and len(route[1]) < len(lens):  # fewer places (else the work list would only
        # add a load to every CTA's chain: 64 x 262144, 1 x 65536 keep the device routing)
        (cluster, solo_up_to, groups), rows = route
        work = torch.tensor([[b, lens[b] if b >= 0 else 0] for place in rows for b in place],
                            dtype=torch.int32).reshape(-1)  # (row, seq_len) a CTA
        if plan.device.type == "cuda":
            work = work.pin_memory().to(plan.device, non_blocking=True)
        plan.data.update(launch=(cluster, solo_up_to), groups=groups, places=len(rows), work=work)
    else:
        plan.data.update(launch=None)
    plan.data.update(long=long_plan(lens, k, *_device(device_index)) if device_index is not None else None)
    # every row a copy, whole 16-byte stores of it: the call's output, made here on the metadata's device
    short = bool(lens) and max(lens) <= k and len(lens) * k % 4 == 0
    plan.data.update(short=short_output(seq_lens, page_table, k, page_size) if short else None)
    if short and plan.device.type == "cuda":
        # the copy kernel loads it before its PDL wait, which a call right after this would launch while the kernel
        # writing it may still be finishing (its stores visible only past that wait): done before returning
        torch.cuda.current_stream(plan.device).synchronize()
    return plan


@functools.lru_cache(maxsize=64)
def _short_columns(k, page_size, width, device):
    """short_output's constants: the columns 0..k-1, each one's page-table column (clamped to the table's width) and
    its offset in its page (int32), on `device`."""
    column = torch.arange(k, device=device)
    return column, (column // page_size).clamp(max=width - 1), (column % page_size).int()


def short_output(seq_lens, page_table, k, page_size):
    """The output of a call whose rows are all <= k, from its metadata alone, on its device: each row's columns
    < seq_len through its page-table entries, in column order, -1 past them (a few small torch kernels, once a step:
    not a host copy, whose pinned staging measured ~0.4 ms a plan; the column constants cached: 182 -> 71 us on the
    H100, session 22's call 2). int32 throughout: page x page_size + offset wraps as the int64 form's cast did."""
    if not page_table.shape[1]:  # no row has a column
        return torch.full((page_table.shape[0], k), -1, dtype=torch.int32, device=page_table.device)
    column, page, offset = _short_columns(k, page_size, page_table.shape[1], page_table.device)
    return torch.where(column[None, :] < seq_lens[:, None], torch.add(offset, page_table[:, page], alpha=page_size), -1)


def copy_launch(elements, sms):
    """The short plan's copy of `elements` int32s (a multiple of 4): (grid, pdl); PDL where the grid is one wave
    (2048 threads an SM)."""
    ctas = -(-elements // (4 * COPY_THREADS))
    return (ctas,), ctas <= sms * (2048 // COPY_THREADS)


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True, plan=None):
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    if plan is not None:
        plans.check_plan(plan, "topk_indices", logits.device, *_metadata(seq_lens, page_table, k, page_size), validate)
    if k > MAX_K:
        raise ValueError(f"topk_indices (CUDA): k = {k} exceeds {MAX_K} (the write-out's staging in shared memory)")
    out = torch.empty((layout.batch, k), dtype=torch.int32, device=logits.device)
    if layout.batch:
        device_index = logits.device.index if logits.device.index is not None else torch.cuda.current_device()
        aligned = layout.columns % 4 == 0 and logits.data_ptr() % 16 == 0
        sms, clusters = _device(device_index)
        route = os.environ.get("DSV4_TOPK_ROUTE", "plan")
        short = plan.data.get("short") if plan is not None and route != "device" else None
        # (its shape too: an unvalidated plan of other metadata gives wrong indices, never a read past its tensor)
        if (short is not None and short.device == logits.device and short.shape == out.shape
                and os.environ.get("DSV4_TOPK_SHORT", "1") != "0"):
            grid, pdl = copy_launch(out.numel(), sms)
            launch("topk_indices.cu", "dsv4_topk_indices_copy", grid, (COPY_THREADS,), (short, out, out.numel() // 4),
                   logits.device, pdl=pdl)
            return out
        runs = _launches_from_env(layout.batch, layout.columns, aligned, sms, clusters, os.environ)
        runs = _long_planned(runs, plan, layout.batch, layout.columns, aligned, sms, route,
                             lambda kernel, shared: _max_active_clusters(kernel, shared, device_index))
        runs = _planned(runs, plan, sms, logits.device, route)
        common = (logits, layout.columns, seq_lens, page_table, page_table.stride(0), out, k, page_size)
        for kernel, grid, shared, pdl, extra in runs:
            if shared:
                _opt_in(kernel, shared, logits.device)
            if kernel in ("dsv4_topk_indices_wide1", *TWIN_KERNELS.values()) or kernel.startswith(
                    "dsv4_topk_indices_wide16<"):
                _two_per_sm(kernel, logits.device)
            if kernel in ("dsv4_topk_indices_lean<16>", "dsv4_topk_indices_lean_regs<16, 1>"):
                _non_portable(kernel, logits.device)
            launch("topk_indices.cu", kernel, grid, (THREADS,), (*common, *extra), logits.device, shared_mem=shared,
                   pdl=pdl)
    return out


def _planned(runs, plan, sms, device, route):
    """The call's launches, with the plan's work list where it fits them: one cluster launch of the
    plan's cluster size and solo bound (a logits width past the longest row can give another; then
    the call routes on the device, as without a plan: the same bits), its list on the call's device
    (a plan of CPU metadata, trusted unchecked, is not launched with). route: DSV4_TOPK_ROUTE
    (`device` leaves every call to the device routing, plan or not)."""
    if plan is None or route == "device" or plan.data.get("launch") is None or len(runs) != 1:
        return runs
    if plan["work"].device != device:
        return runs
    kernel, (cluster, _), shared, _, extra = runs[0]
    if not kernel.startswith(PLANNED_KERNELS) or extra[0] != -1 or (
            (cluster, extra[1]) != plan["launch"] or bool(extra[2] & WIDE_GROUPS) != plan["groups"]):
        return runs
    places = plan["places"]
    pdl = places * cluster <= sms  # a grid of one wave overlaps the kernel before (as launches())
    return [(kernel, (cluster, places), shared, pdl, (*extra[:3], plan["work"]))]


def _long_planned(runs, plan, batch, columns, aligned, sms, route, active=None, env=os.environ):
    """The call's launches with the plan's long-batch kernel (long_plan) in place of its wide<8> launch, where
    the plan chose one and the call's launch is the one it was chosen for (the same skip bound, solo bound
    and options: then every row takes the CTAs the plan checked); the kernel's own launch (wide16_launch,
    twin_run at DSV4_TOPK_TWIN of `env`) may still decline the call's shape. route: DSV4_TOPK_ROUTE (`device`:
    as without a plan); active: twin_run's (asked only at DSV4_TOPK_TWIN=auto)."""
    long = None if plan is None or route == "device" else plan.data.get("long")
    if long is None or len(runs) != 1:
        return runs
    kernel, _, _, _, extra = runs[0]
    if kernel != "dsv4_topk_indices_wide<8>" or tuple(extra[:3]) != long[1]:
        return runs
    options = extra[2]
    run = (wide16_launch(batch, columns, aligned, sms, options, 0) if long[0] == "wide16"
           else twin_run(batch, columns, aligned, sms, options, env.get("DSV4_TOPK_TWIN", "auto"), active))
    return runs if run is None else [run]
