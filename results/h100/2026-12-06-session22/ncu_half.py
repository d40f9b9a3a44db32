import torch
from kernels_cuda.topk_indices import topk_indices
torch.manual_seed(0)
B, L, k = 256, 16384, int(__import__("os").environ.get("K", "512"))
logits = torch.randn(B, L, device="cuda")
lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
table = torch.randint(0, 1 << 20, (B, L // 64), dtype=torch.int32, device="cuda")
for _ in range(5):
    topk_indices(logits, lens, table, k=k, validate=False)
torch.cuda.synchronize()
