import os

import torch

if not torch.cuda.is_available():  # Triton kernels run in its interpreter; must precede importing Triton
    os.environ.setdefault("TRITON_INTERPRET", "1")

# --backend, --device, --full, the gpu and slow markers and the xdist GPU sharding come from the harness's
# pytest plugin. An installed package registers it through its pytest11 entry point (named as the module,
# so this line then finds it loaded); a checkout that was never installed loads it here.
pytest_plugins = ["harness.pytest_plugin"]
