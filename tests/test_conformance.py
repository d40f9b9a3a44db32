"""The conformance suite: every catalogue case on every chosen backend, one test per (op, family,
backend). Choose backends with --backend NAME (repeatable) and the device with --device; production
shapes are marked slow, and anything on CUDA is marked gpu."""

import pytest

from harness import backends
from harness import cases as C
from harness import check as K


def _params(config):
    device = K.pick_device(config.getoption("--device"))
    names = config.getoption("--backend") or [n for n, why in backends.availability(device=device).items()
                                               if why is None]
    groups = {}
    for case in C.select(tier="full"):
        groups.setdefault((case.op, case.family, case.tier), []).append(case)
    params = []
    for name in names:
        for (op, family, tier), group in groups.items():
            marks = ([pytest.mark.slow] if tier == "full" else []) + ([pytest.mark.gpu] if device == "cuda" else [])
            params.append(pytest.param((name, device, group), marks=marks, id=f"{op}-{family}-{tier}-{name}"))
    return params


def pytest_generate_tests(metafunc):
    if "conformance" in metafunc.fixturenames:
        metafunc.parametrize("conformance", _params(metafunc.config))


def test_conformance(conformance):
    name, device, group = conformance
    try:
        backend = backends.load(name, device)
    except backends.BackendUnavailable as err:
        pytest.skip(str(err))
    results = [K.check_case(backend, case, device) for case in group]
    failures = [r for r in results if r.failed]
    assert not failures, "\n".join(f"{r.case.id} (seed {r.case.seed}): {r.message}\n  repro: {r.repro}"
                                   for r in failures)
    if all(r.status == "skip" for r in results):
        pytest.skip(results[0].message)
    known = [r for r in results if r.status == "known"]
    if known:  # reported, not failed: the ledger says why (harness/known.py)
        pytest.xfail("; ".join(f"{r.case.id}: {r.message}" for r in known))
