"""The tree passes ruff with the project's rules (pyproject.toml [tool.ruff.lint]: pyflakes and the
120-column line length); CI installs ruff with the test extra."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_tree_passes_ruff():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    done = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
