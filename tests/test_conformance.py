"""The conformance suite: every catalogue case on every chosen backend, one test per (op, family,
backend). Choose backends with --backend NAME (repeatable) and the device with --device; production
shapes are marked slow, and anything on CUDA is marked gpu. The test and its parametrisation are the
harness's pytest plugin's (harness/pytest_plugin.py), the same that any project installing the
harness gets; this file only imports it."""

from harness.pytest_plugin import test_dsv4_conformance  # noqa: F401
