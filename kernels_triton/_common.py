"""What the Triton kernels share: the interpreter switch and the request plans built on the device."""

import os

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def exclusive_cumsum(x):
    return torch.cumsum(x, 0) - x
