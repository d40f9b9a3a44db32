"""The cluster merge of the ws kernel's two splits (DSV4_ATTENTION_MERGE=kernel turns it off) and the gathers' L2
policy: which launches a call makes, and the launch attributes the loader hands cuLaunchKernelEx (no GPU: the
launches are captured)."""
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
        launched.append((expr, grid, cluster, pdl, args))

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
    monkeypatch.setenv("DSV4_ATTENTION_MERGE", "cluster" if merge else "kernel")
    launched = _captured(monkeypatch, positions=[900, 30], heads=64, splits=2)
    assert launched[0][0].startswith("dsv4_sparse_attention_ws<") and launched[0][1][2] == 2
    if merge:
        assert len(launched) == 1 and launched[0][2] == (1, 1, 2)
    else:
        assert launched[0][2] is None and launched[1][0].startswith("dsv4_sparse_attention_combine<")


def test_other_split_counts_keep_the_combine_kernel(monkeypatch):
    monkeypatch.delenv("DSV4_ATTENTION_MERGE", raising=False)  # the default merges 2 splits in clusters
    for splits in (1, 3):
        launched = _captured(monkeypatch, positions=[4000], heads=64, splits=splits)
        assert all(c is None for _, _, c, _, _ in launched)
        kernels = [e.split("<")[0] for e, _, _, _, _ in launched]
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


def test_gathers_keep_rows_in_l2_only_where_the_call_reads_them_again(monkeypatch):
    from types import SimpleNamespace
    monkeypatch.delenv("DSV4_ATTENTION_KV_POLICY", raising=False)
    decode = SimpleNamespace(batch=64, topk=640)  # 64 requests, each its own 16K-entry pool
    prefill = SimpleNamespace(batch=4096, topk=640)  # 4096 query rows of one request over its 16K entries
    assert A.KV_POLICIES[A.kv_policy(decode, 64 * 16384)] == "first"
    assert A.KV_POLICIES[A.kv_policy(prefill, 16384 + 4096)] == "last"
    for choice in A.KV_POLICIES:
        monkeypatch.setenv("DSV4_ATTENTION_KV_POLICY", choice)
        assert A.KV_POLICIES[A.kv_policy(decode, 64 * 16384)] == choice
    monkeypatch.setenv("DSV4_ATTENTION_KV_POLICY", "evict")
    with pytest.raises(ValueError, match="DSV4_ATTENTION_KV_POLICY"):
        A.kv_policy(decode, 1)


def test_a_call_passes_the_policy_its_shape_gets_and_splits_in_whole_blocks(monkeypatch):
    monkeypatch.delenv("DSV4_ATTENTION_KV_POLICY", raising=False)
    launched = _captured(monkeypatch, positions=[900, 30], heads=64, splits=2)
    expr, grid, _, _, args = launched[0]
    kv_rows = args[1].shape[0]
    named = dict(zip((name for _, name in _loader.signature("sparse_attention.cu", expr)), args))
    assert named["kv_policy"] == (2 if 2 * args[2].shape[1] <= kv_rows else 0)
    chunk = named["chunk"]
    assert chunk % A.WS_SPLIT_TILE == 0 and chunk < 2 * A.WS_SPLIT_TILE + args[2].shape[1] // 2
