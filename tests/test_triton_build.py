"""harness.triton_build: every Triton launch of the check's quick cases compiles for Hopper on the CPU
(the interpreter, which the CPU tier runs, never compiles a kernel), and a kernel that only the
interpreter can run is caught and named."""

import pytest
import torch
import triton
import triton.language as tl

from harness import triton_build as build


@triton.jit
def grows_in_loop(out_ptr, N: tl.constexpr):
    """A loop-carried value that changes shape: the interpreter runs it, the compiler refuses it."""
    acc = tl.zeros((1,), tl.float32)
    for i in range(N):
        acc = tl.zeros((2,), tl.float32) + tl.sum(acc, 0) + i
    tl.store(out_ptr + tl.arange(0, 2), acc)


def test_every_triton_launch_of_the_quick_cases_compiles_for_hopper():
    rows = build.build(arch=90)
    ops = {entry["module"].rpartition(".")[2] for entry, _, _ in rows}
    assert ops == {"compress", "indexer_logits", "topk_indices", "sparse_attention", "sparse_attention_fp8"}
    # the GPU's launches, not the interpreter's (the wrappers' interpreter flags were off)
    assert not any(entry["constexprs"].get("F32_DOT") or entry["constexprs"].get("INTERPRETING")
                   for entry, _, _ in rows)
    assert all(0 <= shared <= build.SHARED_LIMIT[90] for _, shared, _ in rows)


def test_a_kernel_only_the_interpreter_runs_fails_by_name():
    out = torch.full((2,), float("nan"))
    grows_in_loop[(1,)](out, N=3)  # the CPU tier's interpreter runs it
    assert torch.equal(out, torch.full((2,), 4.0))  # [0, 0], [1, 1], [4, 4]
    entry = build.launch_record(grows_in_loop.fn, (out,), {"N": 3})
    entry["module"] = "tests.test_triton_build"  # as the child imports it, from the repository root
    with pytest.raises(RuntimeError, match=r"grows_in_loop\[N=3\] failed to compile for cuda:90"):
        build._child("compile", {"launches": [entry], "arch": 90}, {"TRITON_INTERPRET": "0"})
