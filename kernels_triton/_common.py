"""What the Triton kernels share: whether they run in Triton's interpreter, and a bf16 rounding
that is right there too."""

import os

import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"



@triton.jit
def to_bf16(x, INTERPRETING: tl.constexpr):
    """fp32 -> bf16, round to nearest even. The interpreter's conversion does not round to nearest
    (errors up to 2^-7 relative), so there the rounding is done on the bits first (finite values;
    the result is then exact in bf16); on the GPU it is the plain conversion."""
    if INTERPRETING:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)
    else:
        return x.to(tl.bfloat16)
