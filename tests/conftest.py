import os

import pytest
import torch

if not torch.cuda.is_available():  # Triton kernels run in its interpreter; must precede importing Triton
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    # pytest-xdist shards the GPU tests one worker per GPU: worker gwN takes GPU N mod count
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and torch.cuda.is_available():
        torch.cuda.set_device(int(worker[2:]) % torch.cuda.device_count())
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped without one")
    config.addinivalue_line("markers", "slow: long-running; deselect with -m 'not slow'")


def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="no CUDA device")
    not_full = pytest.mark.skip(reason="production-sized: run with --full")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_gpu)
        if "slow" in item.keywords and not config.getoption("--full"):
            item.add_marker(not_full)


def pytest_addoption(parser):
    parser.addoption("--backend", action="append", default=None, metavar="NAME",
                     help="backend(s) for the conformance tests (registered name or dotted module); "
                          "default: every available one")
    parser.addoption("--device", default="auto", help="cpu, cuda or auto (cuda when there is one)")
    parser.addoption("--full", action="store_true", help="also run the production-sized (slow) tests")
