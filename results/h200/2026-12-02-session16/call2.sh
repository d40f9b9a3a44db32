#!/usr/bin/env bash
# Session 16, call 2: why the half plan declines (max active 16-CTA clusters of wide16<16>, the plan without it)
source "$(dirname "$0")/device_call.sh"
python3 - <<'PY' 2>&1 | tail -20
import sys, torch, kernels_cuda.topk_indices  # noqa
T = sys.modules["kernels_cuda.topk_indices"]
from kernels_cuda import _loader
print("mixed_active", T._mixed_active(0), "device", T._device(0)[0], len(T._device(0)[1]))
for cl, sh in ((16, T._mixed_shared()), (8, T._mixed_shared()), (16, 0)):
    try:
        print("wide16<16> cluster", cl, "shared", sh, _loader.max_active_clusters("topk_indices.cu", T.MIXED_KERNEL, torch.device("cuda", 0), cl, (T.THREADS,), sh))
    except Exception as e:
        print("err", cl, sh, repr(e))
for n in ("dsv4_topk_indices_lean<16>", "dsv4_topk_indices_wide16<8>"):
    try:
        print(n, _loader.max_active_clusters("topk_indices.cu", n, torch.device("cuda", 0), 16 if "16>" in n else 8, (T.THREADS,), 36864))
    except Exception as e:
        print("err", n, repr(e))
PY
