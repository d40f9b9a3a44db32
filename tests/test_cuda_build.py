"""The CUDA backend on a machine without a GPU: every kernel compiles with NVRTC for the supported
architectures with the loader's options (no spills), a compile error comes with its log, and bad
input is rejected by the contract before any launch."""

import os

import pytest

from harness import badinput as B
from harness import contract

if not os.environ.get("CI"):  # CI installs CuPy and NVRTC (ci/install.sh), so there a missing one fails
    pytest.importorskip("cupy")

from kernels_cuda import _loader, build  # noqa: E402


@pytest.mark.parametrize("arch", build.ARCHS)
def test_every_kernel_compiles_without_spills(arch):
    rows = build.build([arch])
    compiled = {(source, expr) for source, _, expr, _ in rows}
    assert compiled == {(s, e) for s, exprs in _loader.KERNELS.items() for e in exprs}
    for source, _, expr, res in rows:
        assert res["registers"] > 0, (source, expr)
        assert res["spill_stores"] == res["spill_loads"] == 0, (source, expr, res)


def test_build_command_prints_the_table(capsys):
    assert build.main(["--arch", "sm_90a"]) == 0
    out = capsys.readouterr().out
    assert "registers" in out and "topk_indices" in out and "compress_c128<4, 2>" in out


def test_a_compile_error_reports_the_log(monkeypatch):
    monkeypatch.setattr(_loader, "source", lambda name: "__global__ void topk_indices() { undefined_thing; }")
    with pytest.raises(RuntimeError, match="undefined_thing"):
        _loader.compile_cubin("topk_indices.cu", "sm_90")
    assert build.main(["--arch", "sm_90"]) == 1


@pytest.mark.parametrize("bad", B.BAD_INPUTS, ids=lambda b: f"{b.op}-{b.argument}-{b.what}".replace(" ", "_"))
def test_bad_input_never_reaches_a_kernel(bad):
    import kernels_cuda
    args, kwargs, _ = B.build(bad)
    with pytest.raises(contract.InputError) as err:
        getattr(kernels_cuda, bad.op)(*args, **kwargs)
    assert err.value.argument == bad.argument


def test_every_kernel_is_named_for_the_sanitizer_filter():
    # ci/sanitize.sh runs racecheck with --kernel-name kns=dsv4_: a kernel named otherwise goes unchecked
    for source, exprs in _loader.KERNELS.items():
        text = (_loader.SOURCE_DIR / source).read_text()
        for expr in exprs:
            assert expr.startswith("dsv4_") and f" {expr.split('<')[0]}(" in text, (source, expr)
