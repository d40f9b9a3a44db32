"""The backend registry resolves names and says why a backend cannot be used."""

import sys

import pytest

from harness import backends
from harness.contract import OPS


def test_reference_resolves_and_exports_the_four_ops():
    b = backends.load("reference", "cpu")
    for op in OPS:
        assert callable(b.op(op))
    assert backends.availability(["reference"], "cpu") == {"reference": None}


def test_unknown_name_says_what_is_registered():
    with pytest.raises(backends.BackendUnavailable, match="registered names: reference"):
        backends.load("no_such_backend_xyz")


def test_module_without_the_ops_is_refused():
    with pytest.raises(backends.BackendUnavailable, match="does not export compress, indexer_logits"):
        backends.load("harness.contract")


def test_broken_import_inside_a_backend_is_reported(tmp_path, monkeypatch):
    (tmp_path / "broken_backend_mod.py").write_text("import definitely_missing_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(backends.BackendUnavailable, match="importing 'broken_backend_mod' failed"):
        backends.load("broken_backend_mod")


def test_user_module_by_dotted_path_and_its_device_hook(tmp_path, monkeypatch):
    pkg = tmp_path / "my_kernels_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(
        "from references import compress, indexer_logits, topk_indices, sparse_attention, sparse_attention_fp8\n"
        "def unavailable_reason(device):\n"
        "    return None if device == 'cpu' else 'this build is CPU-only'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert backends.load("my_kernels_pkg.ops", "cpu").module.__name__ == "my_kernels_pkg.ops"
    with pytest.raises(backends.BackendUnavailable, match="cannot run on cuda: this build is CPU-only"):
        backends.load("my_kernels_pkg.ops", "cuda")
    sys.modules.pop("my_kernels_pkg.ops", None)
    sys.modules.pop("my_kernels_pkg", None)
