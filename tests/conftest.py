import os

import pytest
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


@pytest.fixture(autouse=True)
def _q_tensor_map_without_the_driver(request, monkeypatch):
    # The ws attention kernel takes Q's TMA map (cuTensorMapEncodeTiled, a driver call) as an argument. Tests that
    # are not marked gpu run the wrapper on CPU tensors up to a recorded launch, where no driver encodes one: 128
    # zero bytes stand in (the map's size is what the launch checks). gpu tests keep the driver's.
    if request.node.get_closest_marker("gpu") is None:
        import importlib

        from kernels_cuda._loader import TENSOR_MAP_BYTES
        attention = importlib.import_module("kernels_cuda.sparse_attention")  # (the package exports the function)
        monkeypatch.setattr(attention, "q_tensor_map", lambda q, layout: bytes(TENSOR_MAP_BYTES))
