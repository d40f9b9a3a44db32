"""CUDA `sparse_attention` (sparse_attention.cu).

KERNEL "wgmma" (Hopper, sm_90a, H a multiple of 64): one CTA of two warpgroups per (query row, 64
heads, split of the index list), wgmma over gathered tiles of 64 rows (S = Q K^T from shared memory,
O += P V with P from registers), 2-stage cp.async into the 128-byte-swizzle layout.
KERNEL "wgmma2" (Hopper, H a multiple of 64; not the default until measured): FlashMLA's split, the
two warpgroups take alternate 64-row blocks of a pair for the full S, trade P through shared memory
and each owns half of O; each warpgroup copies its own block, so both buffers' copies overlap.
KERNEL "pipe" (Hopper, H a multiple of 64): the wgmma kernel's math over 32-row tiles in 4 cp.async
stages, so 3 tiles (96 gathered rows) are in flight while one is multiplied (the wgmma kernel: one
64-row tile); O rescaled only by warps whose row maxima moved.
KERNEL "pair" (Hopper, H a multiple of 128): the pipe kernel's body with the two 64-head blocks of a
query row as a cluster of 2 CTAs: each gathers half of every 32-row tile and sends it to the other's
shared memory (bulk copy, mbarrier), so a gathered row crosses from L2 once for 128 heads, not twice.
KERNEL "ws" (Hopper, H a multiple of 64; the default there): warp-specialised, FlashMLA's sparse-prefill
schedule: 384 threads, warpgroup 2 only gathers (cp.async completing on mbarriers, a half buffer refilled
as soon as its last reader is done), warpgroups 0 and 1 each take one 64-row block of a pair for S,
trade row maxima and P through shared memory, own half of O each; warpgroup 0 issues the next S
under its last P V.
KERNEL "h64": one 8-warp CTA per (query row, 64 heads, split), bf16 mma.sync over tiles of 32 rows,
3-stage cp.async. Both split the index list for short grids, and a combine kernel merges the splits.
KERNEL "h16": the first kernel, one 4-warp CTA per (query row, 16 heads).
KERNEL "auto" (default): ws on Hopper, else h64 where its shared memory fits, else h16. ws against wgmma on
the H200 (session 9, ws at 5492fd9, medians us): decode b1 H64 11.7 / 12.8, b8 14.0 / 20.7, b64 37.7 / 37.4,
b256 81.2 / 96.2, b64 H128 K1152 56.8 / 75.9, HCA b64 H64 K8320 179.8 / 238.2, prefill 4096 H64 837.5 / 1239,
H128 2524 / 4002: it wins or ties at every batch. Measured on the H200 at 71421ec (medians us, L2 flushed):
the 32-row pipe body costs about 2 us a tile whatever the gather (pair at hca-decode-b64-h128-k8320 514.6
against 231 for wgmma in run 5; pipe at hca-decode-b64-h64-k8320 271.7 against 229.6; decode-b256-h64-k640
108.6 against 91.7; decode-b64-h128-k1152 pair 90.8 against 74.6; decode-b64-h64-k640 39.5 against 39.0), so
halving the pair's gathered bytes did not pay: the per-tile chain of barrier, S exchange, softmax and waits
bounds it.
The wgmma kernel is a template over its row loader: sparse_attention_fp8.py runs it over the FP8
cache (`launch_split` is the launch both use).
`DSV4_ATTENTION_KERNEL=h64` (or h16, wgmma, wgmma2, pipe, pair, ws) in the environment sets KERNEL, to compare
them (pipe: the decode path before pair).
ws's epilogue stages O in shared memory and stores it by one bulk copy a row (session 10: prefill H64 822 ->
742 us, H128 2503 -> 2280, decode b256 78.3 -> 71.2, b64 H128 56 -> 52; docs/attn-s10.md);
`DSV4_ATTENTION_WS_EPILOGUE=regs` restores the register stores for the A/B. (A merge of the splits by the last
CTA of each (row, head block) instead of the combine kernel measured slower, decode b64 H64 40.2 us against
36.3, and was removed in session 11.)
`DSV4_ATTENTION_LATE_PV=1` (LATE_PV; off until timed) runs pipe and pair with tile i's P V left in flight
while the next tile's copies, barrier and S are issued (P through shared memory, LATE_SHARED_BYTES)."""

import functools
import os

import torch

from harness import contract, plans
from kernels_cuda._loader import env_choice, launch, tensor_map_tiled

KERNEL = os.environ.get("DSV4_ATTENTION_KERNEL", "auto")
LATE_PV = os.environ.get("DSV4_ATTENTION_LATE_PV", "0") == "1"
# ws: a proxy fence after each ready wait (cp.async data before wgmma reads it); FlashMLA has none there.
# DSV4_ATTENTION_WS_READY_FENCE=0 drops it: on the H200 (session 9, call 3) no faster (prefill H64 830.5 us
# against 822.1, decode b64 H64 36.9 against 36.2), so it stays on
WS_READY_FENCE = os.environ.get("DSV4_ATTENTION_WS_READY_FENCE", "1") != "0"
# ws: O staged in the free Q and buffer space and stored by one bulk copy a row (docs/attn-s10.md; the default
# since session 10's call 2); DSV4_ATTENTION_WS_EPILOGUE=regs stores it from registers (64 STG a thread)
WS_EPILOGUE_SMEM = os.environ.get("DSV4_ATTENTION_WS_EPILOGUE", "smem") != "regs"
# ws (docs/attn-s11.md; defaults since session 11's call 3, where the three together took prefill H64 767.1 ->
# 656.7 us, H128 2286.3 -> 2094.9, decode b256 69.7 -> 64.4, b64 H128 51.2 -> 49.0, all checks passing):
# the producer writes each block's valid-row flags to shared memory (a math thread reads one word a pair
# instead of 16 index-list loads; DSV4_ATTENTION_WS_FLAGS=loads for the A/B); P is ex2.approx.ftz(S * scale - m),
# one FFMA and one MUFU an element (DSV4_ATTENTION_WS_SOFTMAX=exp2f for the A/B); unsplit launches run as a
# grid of at most one CTA an SM, each looping over (row, head block) items, the next item's Q and first gather
# under the last one's epilogue (DSV4_ATTENTION_PERSISTENT=0 for the A/B; alone: b256 66.8, prefill H64 737.8)
WS_FLAGS_SMEM = os.environ.get("DSV4_ATTENTION_WS_FLAGS", "smem") != "loads"
WS_SOFTMAX_FFMA = os.environ.get("DSV4_ATTENTION_WS_SOFTMAX", "ffma") != "exp2f"
WS_PERSISTENT = os.environ.get("DSV4_ATTENTION_PERSISTENT", "1") != "0"
# ws, persistent (docs/attn-s12a.md; off until timed): DSV4_ATTENTION_TAIL=split cuts the items past the grid's last
# full round (prefill 4096 H64: 4 items after 31 x 132) into splits of one pair of 64-row blocks each, their fp32
# partials merged by the combine kernel after the grid, so the last round takes one pair's time, not one item's;
# split64: splits of one 64-row block (the A/B of the pair's size); none (default): whole items
WS_TAIL = env_choice("DSV4_ATTENTION_TAIL", ("none", "split", "split64"), "none")
WS_TAIL_SPLIT = WS_TAIL != "none" and WS_PERSISTENT
# ws producer (docs/attn-s12b.md; opt-in until timed): DSV4_ATTENTION_PRODUCER=ahead keeps the indices two pairs
# ahead (loaded a pair before their first copy) and loads the first two pairs' before Q (split kernel) or before the
# q_free wait (persistent); prefetch also sends the next pair's rows to L2 (one bulk prefetch a row) a pair before
# their copies; loads is session 9's producer. Only when loads issue changes: the same bits.
# lean (docs/attn-s14d.md; the default since session 14's call 6: prefill H64 656.8 -> 635.8 us, H128 2080.2 -> 2035.2
# beside FlashMLA's 628.6 / 1967.6, check --full 84/84 under it): loads' order and lead, but between a half buffer's
# free wait and its ready arrival only that half's copies and arrivals (FlashMLA's shape): the pair's row addresses and
# flag words are made before its first free wait, its index loads from one base pointer. The same copies and flags
PRODUCERS = ("loads", "ahead", "prefetch", "lean")
PRODUCER = env_choice("DSV4_ATTENTION_PRODUCER", PRODUCERS, "lean")
# ws (docs/attn-s13a.md): DSV4_ATTENTION_Q=tma (the default since session 13's call 1: decode b64 H64 30.4 -> 29.2 us,
# b64 H128 51.0 -> 49.2 on the H200, bitwise the copies' output) brings Q by 8 TMA copies (cp.async.bulk.tensor,
# 128-byte swizzle) that math thread 0 issues on bar_q (expect_tx), as FlashMLA does, so the producer starts on the
# indices and gathers at once; the persistent kernel refills Q from that thread too. copies: the producer's 4096
# cp.async an item. Only how Q arrives changes: the same bits
Q_LOADS = ("copies", "tma")
Q_LOAD = env_choice("DSV4_ATTENTION_Q", Q_LOADS, "tma")
WS_Q_TMA = Q_LOAD == "tma"
# ws (docs/attn-s13b.md; opt-in until timed): DSV4_ATTENTION_MATH=split runs the math warpgroups' softmax in a shorter
# chain to the tensor cores: the running max published before the exponentials, the own block's P V issued a k-step
# (16 columns) at a time right after that step's exponentials, each valid-row flag tested by one instruction.
# base (default): the measured order. The same operations on the same values: the same bits. Needs the FFMA softmax
MATHS = ("base", "split")
MATH = env_choice("DSV4_ATTENTION_MATH", MATHS, "base")
if MATH == "split" and not WS_SOFTMAX_FFMA:
    raise ValueError("DSV4_ATTENTION_MATH=split builds on the FFMA softmax: not with DSV4_ATTENTION_WS_SOFTMAX=exp2f")
WS_MATH_SPLIT = MATH == "split"
# ws, persistent (docs/attn-s14a.md): DSV4_ATTENTION_ORDER=rows numbers the grid's items row-major (item = row x head
# blocks + head block, FlashMLA's CTA order), so at H 128 a row's two head blocks run at once on neighbouring CTAs and
# the second gathers rows the first has just brought to L2; the default since session 15's call 2 (prefill H128 under
# WS_OUT=tma 2022.6 -> 1987.4 us in call 1). blocks: head-block-major (item = head block x batch + row), the default
# under the tail split (its pieces are the last rows of the last head block) and under PRODUCER=prefetch (with rows
# its persistent kernels spill 16 B under NVRTC 13.0). Only which CTA takes which item changes: the same bits
ORDERS = ("blocks", "rows")
ORDER = env_choice("DSV4_ATTENTION_ORDER", ORDERS, "blocks" if WS_TAIL_SPLIT or PRODUCER == "prefetch" else "rows")
if ORDER == "rows" and WS_TAIL_SPLIT:
    raise ValueError("DSV4_ATTENTION_ORDER=rows: not with DSV4_ATTENTION_TAIL (its pieces are head-block-major)")
WS_ORDER_ROWS = ORDER == "rows"
# ws (docs/attn-s14a.md): DSV4_ATTENTION_QO_POLICY=first loads Q (the TMA copies) and stores out (the epilogues' bulk
# copies; not the splits' fp32 partials, nor the 2-split cluster merge's rows) under an L2 evict_first policy, as
# FlashMLA loads Q: at prefill 256 MB of each (H64) pass through L2 once, and then replace one another rather than the
# gathered rows (evict_last), of which session 12's ncu saw ~100 MB re-read from DRAM. The default since session 15's
# call 4 (call 3, prefill H64 / H128 at WS_OUT=tma + ORDER=rows: 622.5 / 1991.0 -> 614.7 / 1964.2 us; with
# P_STORE=stmatrix 612.2 / 1961.9). normal: no hint, the default under DSV4_ATTENTION_Q=copies. Only the cache policy
# changes: the same bits
QO_POLICIES = ("normal", "first")
QO_POLICY = env_choice("DSV4_ATTENTION_QO_POLICY", QO_POLICIES, "first" if WS_Q_TMA else "normal")
if QO_POLICY == "first" and not WS_Q_TMA:
    raise ValueError("DSV4_ATTENTION_QO_POLICY=first hints Q's TMA copies: not with DSV4_ATTENTION_Q=copies")
WS_QO_EVICT_FIRST = QO_POLICY == "first"
# ws (docs/attn-s14b.md): DSV4_ATTENTION_P_STORE=stmatrix stores P_A and P_B (under MATH=split P_A only) by 4
# stmatrix.x4 a thread, as FlashMLA does, instead of 16 st.shared.b32: the same words, the same bits. The default since
# session 15's call 4 (call 3, prefill H64 / H128: 622.5 / 1991.0 -> 616.6 / 1972.8 us, again 616.2 / 1968.5).
# sts: the 16 stores
P_STORES = ("sts", "stmatrix")
P_STORE = env_choice("DSV4_ATTENTION_P_STORE", P_STORES, "stmatrix")
# ws, persistent (docs/attn-s14c.md): DSV4_ATTENTION_WS_OUT=tma stages an item's bf16 out as the 128-byte-swizzled tile
# (Q's layout) and stores it by 8 TMA tensor stores (4 a warpgroup, one thread each, over a tensor map of out:
# q_tensor_map_args, out has q's shape), as FlashMLA does, instead of 120 row copies (15 a math warp); each warpgroup
# frees its own half of buffer 1 once its stores have read it. The default since session 15's call 2 (call 1, every
# #15 case beside FlashMLA under it: prefill H64 636.3 -> 624.5 us, H128 2039.9 -> 2022.6, decode unchanged within
# noise). bulk: the row copies; the default under DSV4_ATTENTION_Q=copies (no map type). lse, the splits and the tail
# split's partials stay. The same bytes: the same bits
WS_OUTS = ("bulk", "tma")
WS_OUT = env_choice("DSV4_ATTENTION_WS_OUT", WS_OUTS, "tma" if WS_Q_TMA else "bulk")
if WS_OUT == "tma" and not WS_Q_TMA:
    raise ValueError("DSV4_ATTENTION_WS_OUT=tma takes out's tensor map beside Q's: not with DSV4_ATTENTION_Q=copies")
WS_OUT_TMA = WS_OUT == "tma"
# the split-K count: chosen by shape (plans.attention_splits) unless DSV4_ATTENTION_SPLITS forces one (tuning;
# each split is rounded to whole tiles, so the launched count can be lower)
SPLITS = int(os.environ.get("DSV4_ATTENTION_SPLITS", "0")) or None

# compile-time constants of sparse_attention.cu (both ops' kernels): defined here only, the loader passes
# DEFINES as -D options
TILE, KV_STRIDE = 32, 1040  # h16 / h64: rows a tile; bytes a shared row (16-byte aligned, bank-spread)
KV_ROW_BYTES = contract.ATTN_DIM * 2  # 512 bf16
# h16
HEADS_PER_CTA = 16
WARPS = 4
SHARED_BYTES = 2 * TILE * KV_STRIDE + WARPS * 16 * 32 * 4 + 2 * TILE * 4
# h64
H64_HEADS, H64_WARPS, STAGES = 64, 8, 3
H64_SHARED_BYTES = STAGES * TILE * KV_STRIDE + H64_WARPS * 16 * 32 * 4 + STAGES * TILE * 4 + H64_HEADS * KV_STRIDE
# wgmma: alignment slack, Q, 2 stages of 64 swizzled rows, the two warpgroups' S partials, the flags
WG_TILE, WG_STAGES = 64, 2
WG_SHARED_BYTES = (1024 + WG_TILE * KV_ROW_BYTES + WG_STAGES * WG_TILE * KV_ROW_BYTES + 2 * 64 * 64 * 4
                   + WG_STAGES * WG_TILE * 4)
# wgmma2: alignment slack, Q, 2 buffers of 64 swizzled rows, P of both blocks, row max / sum, indices of 2 pairs
WG2_PAIR = 128
WG2_SHARED_BYTES = 1024 + 3 * WG_TILE * KV_ROW_BYTES + 2 * 64 * 128 + 2 * 64 * 4 + 2 * WG2_PAIR * 4
# ws: alignment slack, Q, 2 buffers of 64 swizzled rows, P of both blocks, row max and sum exchange, 9 mbarriers,
# (WS_FLAGS_SMEM) the 16 bytes of flags, (WS_PERSISTENT) the q_free mbarrier; 3 warpgroups (2 math, 1 producer)
WS_SHARED_BYTES = (1024 + 3 * WG_TILE * KV_ROW_BYTES + 2 * 64 * 128 + 2 * 2 * 64 * 4 + 9 * 8 + 16 * WS_FLAGS_SMEM
                   + 8 * WS_PERSISTENT)
WS_THREADS = 384
# pipe: alignment slack, Q, 4 stages of 32 swizzled rows, the S partials (2 x 64 x 32 fp32), the flags
PIPE_TILE, PIPE_BF16_STAGES = 32, 4
PIPE_SHARED_BYTES = (1024 + 64 * KV_ROW_BYTES + PIPE_BF16_STAGES * PIPE_TILE * KV_ROW_BYTES + 2 * 64 * PIPE_TILE * 4
                     + PIPE_BF16_STAGES * PIPE_TILE * 4)
# pair: alignment slack, Q, 4 buffers of 32 swizzled rows, the S partials, the flags, 4 mbarriers
PAIR_BF16_BUFS = 4
PAIR_SHARED_BYTES = (1024 + 64 * KV_ROW_BYTES + PAIR_BF16_BUFS * PIPE_TILE * KV_ROW_BYTES + 2 * 64 * PIPE_TILE * 4
                     + PAIR_BF16_BUFS * PIPE_TILE * 4 + PAIR_BF16_BUFS * 8)
PAIR_HEADS = 128  # a cluster's two 64-head CTAs
# LATE_PV pipe / pair: the loader's region rounded up to 1024 bytes, then the two warpgroups' P blocks
LATE_P_AT = contract.cdiv(PIPE_BF16_STAGES * PIPE_TILE * KV_ROW_BYTES + 2 * 64 * PIPE_TILE * 4 + 1024, 1024) * 1024
LATE_SHARED_BYTES = 1024 + 64 * KV_ROW_BYTES + LATE_P_AT + 2 * 64 * 128
# the FP8 kernels' (sparse_attention_fp8.py): a staged record's pitch (576 bytes, 8 scale bytes, 8 spare), the
# pipe's raw stages (LATE_PV pipe: 3, its P blocks need the room), the pair's bf16 buffers and raw stages
FP8_PITCH = 592
PIPE_RAW_STAGES, FP8_LATE_RAW_STAGES = 4, 3
PAIR_FP8_BUFS, PAIR_RAW_STAGES = 3, 5
# under the .cu's names (the Python constants above are named as in the .cu)
DEFINES = {"DIM": contract.ATTN_DIM, "TILE": TILE, "WARPS": WARPS, "KV_STRIDE": KV_STRIDE, "H64_WARPS": H64_WARPS,
           "STAGES": STAGES, "WG_TILE": WG_TILE, "WG_STAGES": WG_STAGES, "PIPE_TILE": PIPE_TILE,
           "PIPE_BF16_STAGES": PIPE_BF16_STAGES, "PAIR_BF16_BUFS": PAIR_BF16_BUFS, "FP8_PITCH": FP8_PITCH,
           "PIPE_RAW_STAGES": PIPE_RAW_STAGES, "FP8_LATE_RAW_STAGES": FP8_LATE_RAW_STAGES,
           "PAIR_FP8_BUFS": PAIR_FP8_BUFS, "PAIR_RAW_STAGES": PAIR_RAW_STAGES, "HEADS_PER_CTA": HEADS_PER_CTA,
           "H64_HEADS": H64_HEADS, "WG2_PAIR": WG2_PAIR, "WS_READY_FENCE": int(WS_READY_FENCE),
           "WS_EPILOGUE_SMEM": int(WS_EPILOGUE_SMEM), "WS_FLAGS_SMEM": int(WS_FLAGS_SMEM),
           "WS_SOFTMAX_FFMA": int(WS_SOFTMAX_FFMA), "WS_PERSISTENT": int(WS_PERSISTENT),
           "WS_TAIL_SPLIT": int(WS_TAIL_SPLIT),
           "WS_PRODUCER_AHEAD": int(PRODUCER in ("ahead", "prefetch")),
           "WS_PRODUCER_PREFETCH": int(PRODUCER == "prefetch"), "WS_PRODUCER_LEAN": int(PRODUCER == "lean"),
           "WS_Q_TMA": int(WS_Q_TMA),
           "WS_MATH_SPLIT": int(WS_MATH_SPLIT), "WS_ORDER_ROWS": int(WS_ORDER_ROWS),
           "WS_QO_EVICT_FIRST": int(WS_QO_EVICT_FIRST), "WS_P_STMATRIX": int(P_STORE == "stmatrix"),
           "WS_OUT_TMA": int(WS_OUT_TMA)}
# the combine kernel (launches of more than 2 splits, or DSV4_ATTENTION_MERGE=kernel): a warp a (row, head),
# COMBINE_HEADS heads a CTA; the first COMBINE_SPLITS splits' partials loaded before their weights (one L2 round
# trip at 2 splits)
COMBINE_HEADS, COMBINE_SPLITS = 8, 2
DEFINES.update(COMBINE_HEADS=COMBINE_HEADS, COMBINE_SPLITS=COMBINE_SPLITS)
# The ws kernel's L2 policy for its gathered rows (its kv_policy argument; kv_policy() picks it):
# evict_last where the call gathers more rows than the cache holds, so some are read again (prefill: neighbouring
# query rows share most of theirs), else evict_first (decode: each request reads its own rows about once). On the
# H200 (session 11, calls 1-2) evict_first took decode b64 H64 35.9 -> 33.3 us, b256 71.4 -> 68.7, HCA 173.8 ->
# 169.6, while prefill H64 / H128 went 740 -> 841 / 2302 -> 2834 (evict_normal: 744 / 2295). DSV4_ATTENTION_KV_POLICY
# (read at each call): auto (that rule), last, normal or first.
KV_POLICIES = ("last", "normal", "first")


def kv_policy(layout, kv_rows, env=os.environ):
    """The gathers' policy (an index of KV_POLICIES) for a call of layout.batch rows of layout.topk indices into a
    cache of kv_rows rows."""
    choice = env.get("DSV4_ATTENTION_KV_POLICY", "auto")
    if choice == "auto":
        return KV_POLICIES.index("last" if layout.batch * layout.topk > kv_rows else "first")
    if choice not in KV_POLICIES:
        raise ValueError(f"DSV4_ATTENTION_KV_POLICY={choice!r}: one of auto, {', '.join(KV_POLICIES)}")
    return KV_POLICIES.index(choice)


# A ws launch of exactly 2 splits runs as 2-CTA clusters that merge through distributed shared memory
# (ws_cluster_merge): no fp32 partials, no combine kernel. On the H200 (session 11, call 2) decode b64 H64 took
# 33.3 -> 30.4 us with it. DSV4_ATTENTION_MERGE=kernel (read at each call) keeps the combine kernel (the A/B).
# The split count comes from whole pairs (WG2_PAIR rows); two splits then take whole 64-row blocks (WS_SPLIT_TILE;
# the last pair may hold one), so 640 indices split 320 + 320 rather than 384 + 256. (Blocks for every count
# took decode b1 / b8 to 10 splits of one block: 12.1 -> 13.7 us, 14.4 -> 20.6, call 3.)
WS_SPLIT_TILE = 64
# the kernels' parameters, checked by the loader's launch(): the split kernels take q, the rows' source,
# indices, sink, out, lse, the partials and the split; the FP8 ones the cache's paging after them
_OUT = ("ptr sink", "ptr out", "ptr lse")
_SPLIT = (*_OUT, "ptr part_out", "ptr part_lse", "i32 K", "i32 heads", "i32 chunk", "f32 sm_scale")
_BF16_SPLIT = ("ptr q", "ptr kv", "ptr indices", *_SPLIT)
_FP8_SPLIT = ("ptr q", "ptr kv_cache", "ptr indices", *_SPLIT, "i32 page_shift", "i64 page_stride")
SIGNATURES = {"dsv4_sparse_attention": ("ptr q", "ptr kv", "ptr indices", *_OUT, "i32 K", "i32 heads", "f32 sm_scale"),
              **{f"dsv4_sparse_attention_{k}": _BF16_SPLIT for k in ("h64", "wgmma", "wgmma2", "pipe", "pair")},
              # batch: the persistent grid's item count; kv_policy: kv_policy()'s
              "dsv4_sparse_attention_ws": (*_BF16_SPLIT, "i32 batch", "i32 kv_policy",
                                           *(("tmap q_map",) if WS_Q_TMA else ()),  # WS_Q_TMA: q_tensor_map's
                                           *(("tmap out_map",) if WS_OUT_TMA else ())),  # WS_OUT_TMA: out's
              **{f"dsv4_sparse_attention_fp8_{k}": _FP8_SPLIT for k in ("wgmma", "pipe", "pair")},
              "dsv4_sparse_attention_combine": ("ptr part_out", "ptr part_lse", *_OUT, "i32 heads", "i32 splits")}


@functools.lru_cache(maxsize=None)
def _sm_count(device):
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.lru_cache(maxsize=None)
def _shared_optin(device):
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "shared_memory_per_block_optin", 232448 if props.major >= 9 else 166912)


SHARED = {"h64": H64_SHARED_BYTES, "wgmma": WG_SHARED_BYTES, "wgmma2": WG2_SHARED_BYTES, "pipe": PIPE_SHARED_BYTES,
          "pair": PAIR_SHARED_BYTES, "ws": WS_SHARED_BYTES}


def choose_kernel(choice, capability, heads, batch, sms, shared_optin, aligned):
    """The kernel (h16, h64, wgmma, wgmma2, pipe, pair, ws) sparse_attention runs for KERNEL `choice` on a device of
    `capability`, `sms` SMs and `shared_optin` bytes of shared memory a block; aligned: q and kv
    16-byte aligned (cp.async). The wgmma kernels need Hopper (the loader builds sm_90a there), whole
    64-head blocks (pair: 128-head pairs of them) and their shared memory; h64 its shared memory; h16 runs
    anywhere."""
    if choice == "h16" or shared_optin < H64_SHARED_BYTES:
        return "h16"
    hopper = capability == (9, 0) and heads % H64_HEADS == 0 and aligned

    def fits(kernel):
        return hopper and shared_optin >= SHARED[kernel]

    pairs = heads % PAIR_HEADS == 0
    if choice == "pair" and not pairs:  # forced for H not a multiple of 128: the path pair replaces
        choice = "pipe"
    if choice in ("wgmma2", "pipe", "pair", "ws"):  # forced: still needs its shapes and architecture
        return choice if fits(choice) else "h64"
    if choice == "h64":
        return "h64"
    if choice == "auto" and fits("ws"):
        return "ws"
    return "wgmma" if fits("wgmma") else "h64"  # wgmma, or auto where ws does not fit


# WS_Q_TMA's tensor map: q as [rows = batch x heads, 512] bf16 (row pitch 1 KB), a box of 64 dims x 64 heads: the copy
# of dims 64 c .. 64 c + 63 (128 bytes a head, the 128-byte swizzle's span) lands as chunk c of the swizzled Q tile
Q_TMA_BOX = (64, 64)  # (dims, heads)
Q_TMA_SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B
Q_TMA_BF16 = 9  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
Q_TMA_L2_256B = 3  # CU_TENSOR_MAP_L2_PROMOTION_L2_256B


def q_tensor_map_args(rows):
    """cuTensorMapEncodeTiled's arguments for a q of `rows` rows (less its address): data type, global dims (innermost
    first), the strides in bytes of the dims past the first, the box, swizzle, L2 promotion."""
    return (Q_TMA_BF16, (contract.ATTN_DIM, rows), (KV_ROW_BYTES,), Q_TMA_BOX, Q_TMA_SWIZZLE_128B, Q_TMA_L2_256B)


@functools.lru_cache(maxsize=256)
def _q_tensor_map(address, rows):
    return tensor_map_tiled(address, *q_tensor_map_args(rows))


def q_tensor_map(q, layout):
    """The 128-byte CUtensorMap of q (a kernel parameter, so CUDA graphs capture it by value): one host-side encode
    (a few us) per q address and row count, then cached. Also out's under WS_OUT_TMA (out has q's shape and pitch)."""
    return _q_tensor_map(q.data_ptr(), layout.batch * layout.heads)


def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
    layout = contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                             validate=validate)
    out, lse, sink, has_sink = outputs(q, layout, attn_sink)
    if not layout.batch:
        return out, lse
    # h64 takes 179 KB of shared memory: Hopper's 227 KB fits it, the A100's 163 KB does not (h16)
    kernel = choose_kernel(KERNEL, torch.cuda.get_device_capability(q.device), layout.heads, layout.batch,
                           _sm_count(q.device), _shared_optin(q.device),
                           q.data_ptr() % 16 == 0 and kv.data_ptr() % 16 == 0)
    if kernel == "h16":
        launch("sparse_attention.cu", f"dsv4_sparse_attention<{has_sink}>",
               (layout.batch, contract.cdiv(layout.heads, HEADS_PER_CTA)), (WARPS * 32,),
               (q, kv, indices, sink, out, lse, layout.topk, layout.heads, float(sm_scale)), q.device,
               shared_mem=SHARED_BYTES)
        return out, lse
    # wgmma2 and ws work in pairs of 64-row blocks (ws's two-split launches in blocks: launch_split)
    tile = {"wgmma": WG_TILE, "wgmma2": WG2_PAIR, "ws": WG2_PAIR, "pipe": PIPE_TILE,
            "pair": PIPE_TILE}.get(kernel, TILE)
    late = LATE_PV and kernel in ("pipe", "pair")
    ws = kernel == "ws"
    launch_split(f"dsv4_sparse_attention_{kernel}", layout, tile, q, sink, has_sink, out, lse, (kv, indices),
                 (float(sm_scale), layout.batch, kv_policy(layout, kv.shape[0]),
                  *((q_tensor_map(q, layout),) if WS_Q_TMA else ()),
                  *((q_tensor_map(out, layout),) if WS_OUT_TMA else ())) if ws else (float(sm_scale),),
                 LATE_SHARED_BYTES if late else SHARED[kernel], ", true" if late else "",
                 threads=WS_THREADS if ws else H64_WARPS * 32,
                 persistent_ctas=_sm_count(q.device) if ws and WS_PERSISTENT else 0,
                 merge_in_clusters=ws and os.environ.get("DSV4_ATTENTION_MERGE", "cluster") != "kernel")
    return out, lse


def tail_split(batch, head_blocks, grid, topk, rows):
    """(chunk, splits) of the persistent ws grid's tail items under WS_TAIL_SPLIT: the items past its last full
    round (items % grid of them, item = head block x batch + row) cut into splits of whole `rows` (WG2_PAIR, or
    WS_SPLIT_TILE for split64), at most grid // tail of them so that every split runs in the last round
    (pieces <= grid). (topk, 1), whole items, where there is no tail, a split would not shorten it (decode b256:
    124 tail items on 132 CTAs), or the tail is not the last rows of one head block (the combine's launch covers
    those; it always is for H <= 128, tail < grid)."""
    items = batch * head_blocks
    tail = items % grid
    splits = min(contract.cdiv(topk, rows), grid // tail) if tail and tail <= batch else 1
    if splits <= 1:
        return topk, 1
    chunk = contract.cdiv(contract.cdiv(topk, splits), rows) * rows
    return chunk, contract.cdiv(topk, chunk)


def outputs(q, layout, attn_sink):
    """Both attention ops' fresh out and lse, the sink argument (lse stands in, unread, when there is
    none) and the kernels' HAS_SINK template argument."""
    out = torch.empty_like(q)
    lse = torch.empty((layout.batch, layout.heads), dtype=torch.float32, device=q.device)
    return out, lse, attn_sink if attn_sink is not None else lse, "true" if attn_sink is not None else "false"


def launch_split(kernel, layout, tile, q, sink, has_sink, out, lse, rows_args, tail_args, shared_mem,
                 template_tail="", threads=H64_WARPS * 32, persistent_ctas=0, merge_in_clusters=False):
    """The split-K launch of a 64-heads-a-CTA kernel (h64, wgmma, wgmma2, pipe, pair and the FP8 ones: 8 warps;
    the pair kernels' compiled cluster of 2 takes head blocks 2c and 2c + 1, so H is a multiple of 128), whose
    arguments are q, `rows_args`, sink, out, lse, part_out, part_lse, K, heads, chunk, `tail_args`; then
    the combine kernel when the index list is split. Shapes only decide the split, so the launch
    needs no device data (CUDA-graph capturable). template_tail: the kernel's template arguments
    after <HAS_SINK, SPLIT> (", true"). threads: a CTA's (ws: 384, 3 warpgroups). persistent_ctas (ws under
    WS_PERSISTENT: the SM count): an unsplit launch is a 1-D grid of at most that many CTAs over the
    batch x head-block items; under WS_TAIL_SPLIT the items past its last full round run as splits (tail_split)
    whose partials the combine kernel merges after it. merge_in_clusters (ws, unless DSV4_ATTENTION_MERGE=kernel):
    a launch of exactly 2 splits runs as 2-CTA clusters that merge the splits themselves (no partials, no combine
    kernel)."""
    head_blocks = contract.cdiv(layout.heads, H64_HEADS)
    topk = max(layout.topk, 1)
    splits = SPLITS or plans.attention_splits(layout.batch * head_blocks, topk, _sm_count(q.device))
    chunk = contract.cdiv(contract.cdiv(topk, splits), tile) * tile  # whole tiles; only the list's end is ragged
    splits = contract.cdiv(topk, chunk)
    cluster_merge = merge_in_clusters and splits == 2
    if cluster_merge:  # the two halves balanced to a block
        chunk = contract.cdiv(contract.cdiv(topk, 2), WS_SPLIT_TILE) * WS_SPLIT_TILE

    def partials(rows, n):  # fp32 O and lse of n splits a row, which the combine kernel merges
        return (torch.empty((rows, n, layout.heads, contract.ATTN_DIM), dtype=torch.float32, device=q.device),
                torch.empty((rows, n, layout.heads), dtype=torch.float32, device=q.device))

    def combine(rows, part_out, part_lse, sink, out, lse, n):  # over `rows` rows and their part_out's heads
        launch("sparse_attention.cu", f"dsv4_sparse_attention_combine<{has_sink}>",
               (rows, contract.cdiv(part_out.shape[2], COMBINE_HEADS)), (32 * COMBINE_HEADS,),
               (part_out, part_lse, sink, out, lse, layout.heads, n), q.device, pdl=True)

    if splits > 1 and not cluster_merge:
        part_out, part_lse = partials(layout.batch, splits)
    else:
        part_out, part_lse = lse, lse  # not read
    grid = (layout.batch, head_blocks, splits)
    tail_splits = 1
    if persistent_ctas and splits == 1:
        grid = (min(layout.batch * head_blocks, persistent_ctas), 1, 1)
        if WS_TAIL_SPLIT:  # the last round's items split (the kernel reads the split count from chunk < K)
            chunk, tail_splits = tail_split(layout.batch, head_blocks, grid[0], topk,
                                            WS_SPLIT_TILE if WS_TAIL == "split64" else WG2_PAIR)
            tail = layout.batch * head_blocks % grid[0]
            if tail_splits > 1:  # their partials: [tail item][split][heads] (only the last head block's written)
                part_out, part_lse = partials(tail, tail_splits)
    launch("sparse_attention.cu", f"{kernel}<{has_sink}, {'true' if splits > 1 else 'false'}{template_tail}>",
           grid, (threads,),
           (q, *rows_args, sink, out, lse, part_out, part_lse, layout.topk, layout.heads, chunk, *tail_args),
           q.device, shared_mem=shared_mem, **({"cluster": (1, 1, 2)} if cluster_merge else {}))
    if splits > 1 and not cluster_merge:
        # PDL: launched while the split kernel runs (the wgmma and pipe bodies trigger at their start), it
        # waits in pdl_wait() for that grid's partials: the combine's launch gap leaves the critical path
        combine(layout.batch, part_out, part_lse, sink, out, lse, splits)
    if tail_splits > 1:
        # the tail items are the last `tail` rows of the last head block: the combine over those rows and heads
        # (pointer offsets; the row strides stay the call's heads)
        h0 = (head_blocks - 1) * H64_HEADS
        combine(tail, part_out[:, :, h0:], part_lse[:, :, h0:], sink[h0:] if has_sink == "true" else sink,
                out[layout.batch - tail:, h0:], lse[layout.batch - tail:, h0:], tail_splits)
