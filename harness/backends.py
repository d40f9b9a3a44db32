"""The backend registry: a name -> a module exporting the five ops of docs/contract.md, or the reason it cannot.

Registered names map to packages of this repo; any other name is taken as a dotted module path, so
a user checks a kernel of their own with `--backend mypkg.my_kernels`. A backend module may define
`unavailable_reason(device: str) -> str | None` to say why it cannot run on a device (no GPU, no
CuPy, Triton without TRITON_INTERPRET=1 on the CPU...).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from harness.contract import OPS

REGISTERED = {
    "reference": "references",
    "torch": "kernels_torch",
    "triton": "kernels_triton",
    "cuda": "kernels_cuda",
    # peers: public packages' kernels behind the contract API (kernels_peers/__init__.py)
    "sglang": "kernels_peers.sglang_dsv4",
    "deepgemm": "kernels_peers.deepgemm_logits",
    "flashmla": "kernels_peers.flashmla_sparse",
    "flashinfer": "kernels_peers.flashinfer_topk",
    "flashinfer_deterministic": "kernels_peers.flashinfer_topk_deterministic",
}


class BackendUnavailable(RuntimeError):
    """The backend cannot be loaded or cannot run on the requested device; the message says why."""


@dataclass(frozen=True)
class Backend:
    name: str
    module: ModuleType

    def op(self, name):
        return getattr(self.module, name)


def module_path(name: str) -> str:
    return REGISTERED.get(name, name)


def load(name: str, device: str | None = None) -> Backend:
    """Import the backend and check it exports the five ops; with a device, check it can run there."""
    path = module_path(name)
    try:
        module = importlib.import_module(path)
    except ImportError as err:
        missing = getattr(err, "name", None)
        if missing and (missing == path or path.startswith(missing + ".")):
            known = ", ".join(REGISTERED)
            raise BackendUnavailable(f"backend {name!r}: no module {path!r} (registered names: {known}; "
                                     f"or give an importable dotted module path)") from err
        raise BackendUnavailable(f"backend {name!r}: importing {path!r} failed: {err}") from err
    missing_ops = [op for op in OPS if not callable(getattr(module, op, None))]
    if missing_ops:
        raise BackendUnavailable(f"backend {name!r}: module {path!r} does not export {', '.join(missing_ops)}")
    if device is not None:
        reason_fn = getattr(module, "unavailable_reason", None)
        reason = reason_fn(device) if callable(reason_fn) else None
        if reason:
            raise BackendUnavailable(f"backend {name!r} cannot run on {device}: {reason}")
    return Backend(name, module)


def availability(names=None, device=None) -> dict:
    """name -> None if usable, else the reason; registered names by default."""
    result = {}
    for name in names or REGISTERED:
        try:
            load(name, device)
            result[name] = None
        except BackendUnavailable as err:
            result[name] = str(err)
    return result
