"""Conformance runs: each case on a backend and on the float64 reference, compared per contract §5.

For every case: build the inputs (state and unused memory already poisoned), run the reference on a
copy, poison the device's free memory so a fresh output the kernel forgets to write holds NaN bytes,
run the backend on another copy, compare outputs and the state after the call and require the other
inputs untouched, then rerun the backend with validate=False on a third copy and require the same
bits (top-k: the same set per row). Bad-input cases require a ValueError naming the argument.
"""

from __future__ import annotations

import contextlib
import inspect
import time
import traceback
from dataclasses import dataclass, field

import torch

import references
from harness import badinput
from harness import cases
from harness import contract
from harness import known
from harness import ops


@dataclass
class CaseResult:
    case: cases.Case
    backend: str
    device: str
    verdict: str  # pass, fail, error, skip (the backend declined: contract.Unsupported), known (harness/known.py)
    message: str = ""
    metrics: dict = field(default_factory=dict)
    seconds: float = 0.0
    outputs: dict | None = None  # kept for the agreement matrix

    @property
    def ok(self):
        return self.verdict == "pass"

    @property
    def failed(self):
        return self.verdict in ("fail", "error")

    @property
    def repro(self):
        return repro_command(self.backend, self.device, self.case)


def repro_command(backend, device, case):
    return f"python -m harness check --backend {backend} --device {device} --ops {case.op} --case {case.name}"


def pick_device(device):
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def poison_free_memory(device, nbytes=256 << 20):
    """Fill memory the CUDA caching allocator will hand out next with 0xFF (NaN for float types), so
    an output element a kernel never writes reads as NaN. The CPU allocator gives no such handle."""
    if torch.device(device).type != "cuda":
        return
    blocks = [torch.empty(nbytes, dtype=torch.uint8, device=device)]
    blocks += [torch.empty(256 << 10, dtype=torch.uint8, device=device) for _ in range(32)]
    for b in blocks:
        b.fill_(0xFF)
    del blocks


@contextlib.contextmanager
def uninitialized_is_nan(device):
    """On the CPU, where no allocator handle exists: while inside, torch.empty and its kin hand out
    NaN (floats) and the largest integer (ints), so an output element a kernel never writes fails
    there too (torch's deterministic mode fills uninitialised memory; warn_only keeps every op)."""
    if torch.device(device).type != "cpu" or torch.are_deterministic_algorithms_enabled():
        yield
        return
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def outputs_outlived(first, kept, again):
    """contract: outputs are fresh tensors, so they outlive the next call. `kept`: copies of the first
    call's outputs taken before the rerun; `again`: the rerun's outputs. A message, or None."""
    for name, copy in kept.items():
        if not same_bits(first[name], copy):
            return (f"{name}: the first call's output changed when the op was called again (a reused output "
                    f"buffer); contract: outputs are freshly allocated")
        out = again.get(name)
        if out is not None and out.numel() and first[name].numel() and \
                out.untyped_storage().data_ptr() == first[name].untyped_storage().data_ptr():
            return (f"{name}: the second call returned the first call's output memory (a reused output buffer); "
                    f"contract: outputs are freshly allocated")
    return None


def op_calls(case, x):
    """The calls a case makes, as (args, kwargs) on x's tensors: one, or a chain (ops.py)."""
    return ops.calls(case.op, x)


def planner(module, op):
    """The backend's planner for op (contract §7), or None."""
    return getattr(module, f"{op}_plan", None)


def make_plan(module, op, args, kwargs, validate=True, **changes):
    """The backend's plan for one call, from the call's metadata (its planner's parameters), with
    `changes` (argument -> value) applied."""
    plan_fn = planner(module, op)
    named = inspect.signature(getattr(references, op)).bind_partial(*args, **kwargs).arguments
    params = inspect.signature(plan_fn).parameters
    chosen = {name: named[name] for name in params if name in named}
    chosen.update(changes)
    chosen["validate"] = validate
    return plan_fn(**chosen)


def make_plans(module, case, calls, validate=True):
    """One plan per call where the backend plans this op, else None."""
    if planner(module, case.op) is None:
        return None
    return [make_plan(module, case.op, a, kw, validate=validate) for a, kw in calls]


def run_calls(module, case, x, calls, plans=None, **options):
    """Run the calls (op_calls of x) with their plans if given; the case's outputs as a dict."""
    op = getattr(module, case.op)
    results = [op(*a, **{**kw, **options, **({"plan": plans[i]} if plans else {})}) for i, (a, kw) in enumerate(calls)]
    return ops.entry(case.op).named_outputs(x, results)


def run_op(module, case, x, planned=False, **options):
    """Call the op of `case` from `module` on inputs x (updated in place); outputs as a dict.
    planned: with the backend's plans (made first), where it has a planner."""
    calls = op_calls(case, x)
    return run_calls(module, case, x, calls, make_plans(module, case, calls) if planned else None, **options)


def graph_run(module, case, x):
    """The planned calls (validate=False) captured in one CUDA graph, the state restored, then one
    replay: its outputs. Raises where a call synchronises or otherwise cannot be captured."""
    calls = op_calls(case, x)
    plans = make_plans(module, case, calls)
    written = ops.entry(case.op).state
    state = x.args[written].clone() if written is not None else None
    device = x.args[0].device
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up off the capture (first launches load modules, compile)
        run_calls(module, case, x, calls, plans, validate=False)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run_calls(module, case, x, calls, plans, validate=False)
    if state is not None:  # a replay is a new call: it starts from the state the case began with
        x.args[written].copy_(state)
    graph.replay()
    torch.cuda.synchronize(device)
    return {name: t.clone() for name, t in outs.items()}


def compare_outputs(case, x, got, ref):
    """The op's comparator (ops.py) on the case's inputs x: got against ref, a comparators.Comparison."""
    return ops.entry(case.op).compare(x, got, ref)


def same_bits(a, b):
    """Equal shape and bits (NaN payloads included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        a, b = a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8)
    return torch.equal(a, b)


def rerun_differs(case, first, second):
    """The first output whose bits differ between two runs, or None. An op whose rows may come in any
    order (top-k) compares row sets."""
    any_order = ops.entry(case.op).rows_any_order
    for name, a in first.items():
        b = second[name]
        if any_order:
            a, b = a.sort(dim=1).values, b.sort(dim=1).values
        if not same_bits(a, b):
            return name
    return None


def check_bad_input(backend, case, device) -> CaseResult:
    """The backend must raise ValueError naming the argument, and write nothing first."""
    start = time.perf_counter()
    bad = dict(badinput.names(case.op))[case.params["bad"]]
    result = CaseResult(case, backend.name, device, "pass")
    args, kwargs, state = badinput.build(bad, device)
    if bad.argument == "plan" and planner(backend.module, case.op) is None:
        result.verdict, result.message = "skip", f"{backend.name} exports no {case.op}_plan"
        return result
    if isinstance(kwargs.get("plan"), badinput.PlanOf):  # made by the backend's own planner
        changes = {name: make(kwargs.get(name), torch.device(device)) for name, make in kwargs["plan"].changes}
        try:
            kwargs["plan"] = make_plan(backend.module, case.op, args, kwargs, validate=False, **changes)
        except Exception as err:
            result.verdict, result.message = "error", f"{case.op}_plan raised {_describe(err)}"
            return result
    before = state.clone() if state is not None else None
    try:
        getattr(backend.module, case.op)(*args, **kwargs)
        result.verdict = "fail"
        result.message = f"accepted bad {bad.argument} ({bad.what}); contract: ValueError naming it"
    except ValueError as err:
        if not badinput.blames(case.op, str(err), bad.argument):
            result.verdict = "fail"
            result.message = f"bad {bad.argument} ({bad.what}) raised ValueError not naming it first: {err}"
        elif before is not None and not same_bits(before, state):
            result.verdict, result.message = "fail", f"bad {bad.argument} ({bad.what}): state written before the error"
    except Exception as err:
        result.verdict = "fail"
        result.message = f"bad {bad.argument} ({bad.what}) raised {_describe(err)}; contract: ValueError naming it"
    result.seconds = time.perf_counter() - start
    return result


def _tensors(x):
    return [t for t in list(x.args) + list(x.kwargs.values()) if isinstance(t, torch.Tensor)]


def prepare(case, device):
    """The case's inputs and the reference's outputs on them (the inputs stay untouched)."""
    x = cases.build(case, device)
    return x, run_op(references, case, x.clone())


def check_case(backend, case, device, keep_outputs=False, prepared=None) -> CaseResult:
    """prepared: (inputs, reference outputs) from prepare(), to share them across backends."""
    if case.family == "bad-input":
        return check_bad_input(backend, case, device)
    start = time.perf_counter()
    result = CaseResult(case, backend.name, device, "pass")
    try:
        x, ref = prepared or prepare(case, device)
    except Exception as err:  # a harness or reference problem, reported as such
        result.verdict, result.message = "error", f"building or running the reference failed: {_describe(err)}"
        return result
    try:
        poison_free_memory(device)
        mine = x.clone()
        with uninitialized_is_nan(device):
            got = run_op(backend.module, case, mine)
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
    except contract.Unsupported as err:
        result.verdict, result.message = "skip", f"{backend.name} does not support this case: {err}"
        result.seconds = time.perf_counter() - start
        return result
    except Exception as err:
        result.verdict, result.message = "error", f"{backend.name} raised {_describe(err)}"
        result.seconds = time.perf_counter() - start
        return result
    report = compare_outputs(case, x, got, ref)
    # outputs are fresh tensors: none may share memory with an input (a view of the state would
    # change under the caller's feet)
    inputs_storage = {t.untyped_storage().data_ptr() for t in _tensors(mine) if t.numel()}
    for name, out in got.items():
        if name != "state" and out.numel() and out.untyped_storage().data_ptr() in inputs_storage:
            report.fail(f"{name}: shares memory with an input tensor; contract: outputs are freshly allocated")
    # inputs other than the state the op writes are read-only
    written = ops.entry(case.op).state
    for i, (orig, after) in enumerate(zip(_tensors(x), _tensors(mine))):
        if i != written and not same_bits(orig, after):
            report.fail(f"input tensor {i} of {case.op} was modified by the call (only the state may be)")
            break
    result.metrics = report.metrics
    if not report.ok:
        result.verdict, result.message = "fail", report.message
    else:
        try:
            poison_free_memory(device)
            kept = {name: out.clone() for name, out in got.items() if name != "state"}
            with uninitialized_is_nan(device):
                again = run_op(backend.module, case, x.clone(), validate=False)
            differs = rerun_differs(case, got, again)
            if differs:
                result.verdict, result.message = "fail", f"{differs}: a second run gave different bits (nondeterminism)"
            elif outputs_outlived(got, kept, again):
                result.verdict, result.message = "fail", outputs_outlived(got, kept, again)
        except Exception as err:
            result.verdict, result.message = "error", f"{backend.name} raised on the rerun: {_describe(err)}"
    if result.verdict == "pass" and planner(backend.module, case.op) is not None:
        result.verdict, result.message = check_plans(backend, case, device, x, got)
    if result.verdict == "fail":
        entry = known.match(backend.name, case.op, result.message)
        if entry:
            result.verdict, result.message = "known", f"{result.message} [known: {entry.reason} Seen: {entry.seen}]"
    if keep_outputs:
        result.outputs = {"got": got, "inputs": x}
    result.seconds = time.perf_counter() - start
    return result


def check_plans(backend, case, device, x, got):
    """contract §7: the planned call gives the bits of the unplanned one; on CUDA the planned call with
    validate=False is captured in a CUDA graph and a replay gives them too. (status, message)."""
    try:
        poison_free_memory(device)
        planned = run_op(backend.module, case, x.clone(), planned=True)
    except Exception as err:
        return "error", f"{backend.name} raised on the planned call: {_describe(err)}"
    differs = rerun_differs(case, got, planned)
    if differs:
        return "fail", (f"{differs}: the call with a plan gave other bits than the call without (contract section 7: "
                        f"the same result)")
    if torch.device(device).type != "cuda" or not ops.entry(case.op).graph_capturable \
            or not getattr(backend.module, "graph_capturable", True):
        return "pass", ""
    try:
        poison_free_memory(device)
        replayed = graph_run(backend.module, case, x.clone())
    except Exception as err:
        return "fail", (f"the planned call (validate=False) could not be captured in a CUDA graph (contract section 7: "
                        f"it may not synchronise): {_describe(err)}")
    differs = rerun_differs(case, got, replayed)
    if differs:
        return "fail", f"{differs}: a CUDA-graph replay of the planned call gave other bits than the eager call"
    return "pass", ""


SHRINK_BUDGET_S = 120.0  # seconds spent shrinking one failing fuzz case


def shrink(backend, failing, device, budget_s=SHRINK_BUDGET_S):
    """A failing fuzz case's result -> the result of the smallest case found that fails the same way
    (same status, same output or argument named first): greedily the first of shrink_steps that
    still does, until none does or the budget is spent. Its case name rebuilds it (`--case`)."""
    start = time.perf_counter()
    best, progress = failing, True
    kind = failing.message.split(":", 1)[0]
    while progress and time.perf_counter() - start < budget_s:
        progress = False
        for candidate in cases.shrink_steps(best.case):
            if time.perf_counter() - start >= budget_s:
                break
            r = check_case(backend, candidate, device)
            if r.verdict == failing.verdict and r.message.split(":", 1)[0] == kind:
                best, progress = r, True
                break
    return best


def cuda_context_lost(device):
    """After an error: is the device's CUDA context broken? (An illegal address is sticky: every
    later call in the process fails, so a run must stop rather than blame the cases after it.)"""
    if torch.device(device).type != "cuda":
        return False
    try:
        torch.ones(1, device=device).add_(1)
        torch.cuda.synchronize(device)
    except Exception:
        return True
    return False


def _describe(err):
    where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    at = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
    return f"{type(err).__name__}: {err}{at}"


def agree(case, x, a, b):
    """Do two backends' outputs agree within the case's comparator (a taken as the reference)?"""
    return compare_outputs(case, x, b, a).ok
