"""The opt-in cluster merge of the ws kernel's two splits (DSV4_ATTENTION_MERGE=cluster): which launches a call makes,
and the launch attributes the loader hands cuLaunchKernelEx (no GPU: the launches are captured)."""
import ctypes
import importlib

import pytest

from kernels_cuda import _loader

A = importlib.import_module("kernels_cuda.sparse_attention")


def _captured(monkeypatch, positions, heads, splits):
    from harness import inputs
    launched = []

    def launch(name, expr, grid, block, args, device, shared_mem=0, pdl=False, cluster=None):
        _loader.launch_values(expr, _loader.signature(name, expr), args)  # the arguments fit the signature
        launched.append((expr, grid, cluster, pdl))

    monkeypatch.setattr(A, "launch", launch)
    monkeypatch.setattr(A, "choose_kernel", lambda *a: "ws")
    monkeypatch.setattr(A, "_sm_count", lambda device: 132)
    monkeypatch.setattr(A, "_shared_optin", lambda device: 232448)
    monkeypatch.setattr(A, "SPLITS", splits)
    monkeypatch.setattr(A.torch.cuda, "get_device_capability", lambda device: (9, 0))
    x = inputs.attention_inputs(positions=positions, heads=heads, seed=5)
    x.call(A.sparse_attention)
    return launched


@pytest.mark.parametrize("merge", [False, True])
def test_two_splits_merge_in_clusters_of_two_without_the_combine_kernel(monkeypatch, merge):
    monkeypatch.setattr(A, "CLUSTER_MERGE", merge)
    launched = _captured(monkeypatch, positions=[900, 30], heads=64, splits=2)
    assert launched[0][0].startswith("dsv4_sparse_attention_ws<") and launched[0][1][2] == 2
    if merge:
        assert len(launched) == 1 and launched[0][2] == (1, 1, 2)
    else:
        assert launched[0][2] is None and launched[1][0].startswith("dsv4_sparse_attention_combine<")


def test_other_split_counts_keep_the_combine_kernel(monkeypatch):
    monkeypatch.setattr(A, "CLUSTER_MERGE", True)
    for splits in (1, 3):
        launched = _captured(monkeypatch, positions=[4000], heads=64, splits=splits)
        assert all(c is None for _, _, c, _ in launched)
        kernels = [e.split("<")[0] for e, _, _, _ in launched]
        assert kernels == ["dsv4_sparse_attention_ws"] + (["dsv4_sparse_attention_combine"] if splits > 1 else [])


def test_launch_attributes_carry_pdl_and_cluster_dimensions(monkeypatch):
    seen = {}

    class FakeCuda:
        def cuLaunchKernelEx(self, config, function, params, extra):
            c = ctypes.cast(config, ctypes.POINTER(_loader._LaunchConfig)).contents
            seen["grid"], seen["block"] = tuple(c.grid), tuple(c.block)
            seen["attrs"] = [(c.attrs[i].id, tuple(c.attrs[i].value[:3])) for i in range(c.num_attrs)]
            return 0

    monkeypatch.setattr(_loader, "_libcuda", lambda: FakeCuda())
    values = (_loader.np.int32(7),)
    _loader._launch_ex(1, (64, 1, 2), (384,), values, 1024, 0, True, (1, 1, 2))
    assert seen["grid"] == (64, 1, 2) and seen["block"] == (384, 1, 1)
    assert seen["attrs"] == [(_loader._PROGRAMMATIC_STREAM_SERIALIZATION, (1, 0, 0)),
                             (_loader._CLUSTER_DIMENSION, (1, 1, 2))]
    _loader._launch_ex(1, (8,), (256,), values, 0, 0, False, (2,))
    assert seen["attrs"] == [(_loader._CLUSTER_DIMENSION, (2, 1, 1))]
    _loader._launch_ex(1, (8,), (256,), values, 0, 0, True, None)
    assert seen["attrs"] == [(_loader._PROGRAMMATIC_STREAM_SERIALIZATION, (1, 0, 0))]
