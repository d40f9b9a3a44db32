"""What the Triton kernels share: whether they run in Triton's interpreter."""

import os

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

