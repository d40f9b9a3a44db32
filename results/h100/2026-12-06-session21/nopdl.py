"""`python3 nopdl.py <harness args>`: the harness with the fast kernel launched without PDL (session 21's A/B on the
short batch: fast<1> as a plain graph node, no programmatic edge, its griddepcontrol.wait skipped by pdl=0)."""
import importlib
import sys

T = importlib.import_module("kernels_cuda.topk_indices")  # (the package exports the function under that name)

_fast_launch = T.fast_launch
T.fast_launch = lambda *args: (_fast_launch(*args)[0], False)

from harness.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
