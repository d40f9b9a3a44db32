"""Session 21, call 7 (prepared, not run: no device time was left; call7.sh runs it from .gpu/): host wall time of
the top-k planner's device work (us, median of 200 after 20 warm-up): the work list's upload (pinned + non_blocking as
now, pageable .to, torch.tensor(device=)) and the short output (the torch ops as now, and with the column constants
cached), then whole plans of the short and the mixed batch."""
import importlib
import statistics
import time

import torch

T = importlib.import_module("kernels_cuda.topk_indices")
dev = torch.device("cuda")


def timed(fn, n=200):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


rows = [[b, 1000 + b] for b in range(64 * 8)]
def host_rows():
    return torch.tensor(rows, dtype=torch.int32).reshape(-1)


print("work list pinned+non_blocking", round(timed(lambda: host_rows().pin_memory().to(dev, non_blocking=True)), 1))
print("work list pageable .to       ", round(timed(lambda: host_rows().to(dev)), 1))
print("work list tensor(device=)    ", round(timed(lambda: torch.tensor(rows, dtype=torch.int32, device=dev)), 1))
lens = torch.tensor([7 * i + 1 for i in range(64)], dtype=torch.int32, device=dev)
table = torch.randint(0, 1 << 20, (64, 8), dtype=torch.int32, device=dev)
print("short_output torch ops       ", round(timed(lambda: T.short_output(lens, table, 512, 64)), 1))
column = torch.arange(512, device=dev)
page = (column // 64).clamp(max=7)
offset = (column % 64).int()


def cached():
    pages = table[:, page]
    return torch.where(column[None, :] < lens[:, None], torch.add(offset, pages, alpha=64), -1)


assert torch.equal(cached(), T.short_output(lens, table, 512, 64))
print("short_output cached consts   ", round(timed(cached), 1))
print("plan b64-short               ", round(timed(lambda: T.topk_indices_plan(lens, table, k=512), 50), 1))
mixed = torch.tensor([min(262144, (512 << (i % 10)) + 37 * i) for i in range(64)], dtype=torch.int32, device=dev)
mtable = torch.randint(0, 1 << 20, (64, 4096), dtype=torch.int32, device=dev)
print("plan mixed                   ", round(timed(lambda: T.topk_indices_plan(mixed, mtable, k=512), 50), 1))
