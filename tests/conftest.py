import os

import torch

if not torch.cuda.is_available():  # Triton kernels run in its interpreter; must precede importing Triton
    os.environ.setdefault("TRITON_INTERPRET", "1")

# --backend, --device, --full and the markers come from the harness's pytest plugin. An installed package
# registers it through its pytest11 entry point (named as the module, so this line then finds it loaded);
# a checkout that was never installed loads it here.
pytest_plugins = ["harness.pytest_plugin"]


def pytest_collection_modifyitems(config, items):
    # every test here: gpu skipped without CUDA, slow without --full, one xdist worker per GPU
    from harness.pytest_plugin import skip_and_shard
    skip_and_shard(config, items)
