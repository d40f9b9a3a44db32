"""The harness's pytest plugin, registered by the package's `pytest11` entry point, so any project that
installs dsv4-sparse-harness gets:

- the options `--backend NAME` (repeatable, or comma-separated; else the ini setting `dsv4_backends`;
  else every available backend), `--device cpu|cuda|auto` and `--full`;
- for its conformance tests, the markers `gpu` (skipped without a CUDA device) and `slow` (production shapes,
  skipped without `--full`) and one pytest-xdist worker per GPU (worker gwN takes visible GPU N mod count);
  `skip_and_shard(config, items)` gives a project's own tests the same, from its conftest;
- the conformance suite for its own backend module, one test per (op, case family, backend), by importing
  one test function into a test file:

      # tests/test_my_kernels.py
      from harness.pytest_plugin import test_dsv4_conformance  # noqa: F401

      $ pytest --backend mypkg.my_kernels --device cuda [--full]

torch and the harness are imported only when a test asks for them, so the plugin costs nothing to a
project that does not use it. The entry point's name is the module's name, so a conftest that also names
the module in `pytest_plugins` (this repository's, for a checkout that was never installed) loads it once.
"""

from __future__ import annotations

import os

import pytest

FIXTURE = "dsv4_conformance"


def pytest_addoption(parser):
    group = parser.getgroup("dsv4-harness", "DeepSeek-V4 sparse-attention conformance (dsv4-sparse-harness)")
    group.addoption("--backend", action="append", default=None, metavar="NAME",
                    help="backend(s) for the conformance tests: a registered name (reference, torch, triton, cuda, "
                         "sglang, deepgemm, flashmla, flashinfer) or a dotted module exporting the five ops; "
                         "repeat or separate with commas; default: the ini setting dsv4_backends, else every "
                         "available backend")
    group.addoption("--device", default="auto", help="cpu, cuda or auto (cuda when there is one)")
    group.addoption("--full", action="store_true", help="also run the production-sized (slow) tests")
    parser.addini("dsv4_backends", type="linelist", default=[],
                  help="backends for the conformance tests when --backend is not given (one per line)")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped without one")
    config.addinivalue_line("markers", "slow: long-running (production-sized); skipped without --full")
    if config.getoption("--device") == "cpu":  # Triton runs on the CPU only in its interpreter, set before import
        os.environ.setdefault("TRITON_INTERPRET", "1")


def backend_names(config, device):
    """The backends the conformance tests check: --backend, else the ini's dsv4_backends, else every available one."""
    from harness import backends
    chosen = [n for value in config.getoption("--backend") or config.getini("dsv4_backends") for n in value.split(",")
              if n.strip()]
    return [n.strip() for n in chosen] or [n for n, why in backends.availability(device=device).items() if why is None]


def conformance_params(config):
    """One param per (backend, op, family, tier): (backend name, device, the family's cases)."""
    from harness import cases
    from harness import check
    device = check.pick_device(config.getoption("--device"))
    groups = {}
    for case in cases.select(tier="full"):
        groups.setdefault((case.op, case.family, case.tier), []).append(case)
    params = []
    for name in backend_names(config, device):
        for (op, family, tier), group in groups.items():
            marks = [pytest.mark.slow] * (tier == "full") + [pytest.mark.gpu] * device.startswith("cuda")
            params.append(pytest.param((name, device, group), marks=marks, id=f"{op}-{family}-{tier}-{name}"))
    return params


def pytest_generate_tests(metafunc):
    if FIXTURE in metafunc.fixturenames:
        metafunc.parametrize(FIXTURE, conformance_params(metafunc.config))


def test_dsv4_conformance(dsv4_conformance):
    """Every case of one (op, family) on one backend against the float64 reference (contract §5); a failure lists
    each failing case with its seed, the worst element and a command that reproduces it."""
    from harness import backends
    from harness import check
    name, device, group = dsv4_conformance
    try:
        backend = backends.load(name, device)
    except backends.BackendUnavailable as err:
        pytest.skip(str(err))
    results = [check.check_case(backend, case, device) for case in group]
    failures = [r for r in results if r.failed]
    assert not failures, "\n".join(f"{r.case.id} (seed {r.case.seed}): {r.message}\n  repro: {r.repro}"
                                   for r in failures)
    if all(r.verdict == "skip" for r in results):
        pytest.skip(results[0].message)
    known = [r for r in results if r.verdict == "known"]
    if known:  # reported, not failed: the ledger says why (harness/known.py)
        pytest.xfail("; ".join(f"{r.case.id}: {r.message}" for r in known))


def skip_and_shard(config, items):
    """What the gpu and slow markers mean here: a gpu item is skipped without a CUDA device, a slow one without
    --full; on a pytest-xdist worker with gpu items, worker gwN takes visible GPU N mod count."""
    not_full = pytest.mark.skip(reason="production-sized: run with --full")
    for item in items:
        if "slow" in item.keywords and not config.getoption("--full"):
            item.add_marker(not_full)
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch
    if not torch.cuda.is_available():
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason="no CUDA device"))
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw"):
        torch.cuda.set_device(int(worker[2:]) % torch.cuda.device_count())


def pytest_collection_modifyitems(config, items):
    # the plugin's own tests only: a project's own gpu or slow markers keep the meaning it gives them
    skip_and_shard(config, [item for item in items if getattr(item, "originalname", None) == "test_dsv4_conformance"])
