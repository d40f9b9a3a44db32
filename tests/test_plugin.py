"""The pytest plugin and the console script as a user's project meets them after `pip install`: the
entry points are declared, the wheel carries the plugin, and a project of its own gets --backend,
--device and --full and the conformance tests for its backend module from the installed wheel."""

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_plugin_and_the_console_script_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"harness.pytest_plugin": "harness.pytest_plugin"}
    assert project["scripts"]["dsv4-harness"] == "harness.cli:main"
    from harness import cli, pytest_plugin
    assert callable(cli.main) and callable(pytest_plugin.test_dsv4_conformance)


MY_KERNELS = '''
from kernels_torch import compress, indexer_logits, sparse_attention, sparse_attention_fp8  # noqa: F401
from kernels_torch import topk_indices as _right


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):
    out = _right(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    return out.flip(-1) if {wrong} else out
'''


def test_a_project_gets_options_and_conformance_tests_from_the_installed_wheel(tmp_path):
    """Build the wheel from a copy of the sources (a git checkout of its own), install it into a folder of its
    own, and run pytest in a project that imports the plugin's test: a right and a wrong backend module of
    the project's own; the installed harness records the commit its wheel was built from."""
    pytest.importorskip("setuptools")  # the wheel is built without build isolation (no registry needed)
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("harness", "references", "kernels_torch", "kernels_triton", "kernels_cuda", "kernels_peers", "ci"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "BUILD_COMMIT"))
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the sources the wheel is built from"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", str(src), "-w", str(tmp_path / "w")],
                   check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "w").glob("dsv4_sparse_harness-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert "harness/pytest_plugin.py" in z.namelist()
        assert z.read("harness/BUILD_COMMIT").decode().split() == [commit]  # built from a clean tree
        points = next(z.read(n).decode() for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
    assert "[pytest11]\nharness.pytest_plugin = harness.pytest_plugin" in points and "dsv4-harness" in points
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], check=True,
                   capture_output=True)
    project = tmp_path / "project"
    project.mkdir()
    (project / "right_kernels.py").write_text(MY_KERNELS.format(wrong=False))
    (project / "wrong_kernels.py").write_text(MY_KERNELS.format(wrong=True))
    (project / "test_mine.py").write_text("import harness.pytest_plugin\n"
                                          "from harness.pytest_plugin import test_dsv4_conformance  # noqa: F401\n\n\n"
                                          "def test_the_plugin_comes_from_the_wheel():\n"
                                          f"    assert harness.pytest_plugin.__file__.startswith({str(site)!r})\n"
                                          "    from harness import results\n"
                                          f"    assert results.environment('cpu')['git_commit'] == {commit!r}\n\n\n"
                                          "import pytest\n\n\n"
                                          "@pytest.mark.slow  # the project's own marker: the plugin leaves it be\n"
                                          "def test_from_the_wheel_of_its_own_slow_kind():\n"
                                          "    pass\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{project}", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--backend",
                        "right_kernels,wrong_kernels", "--device", "cpu", "-k", "from_the_wheel or "
                        "(topk_indices and short-quick)", "-rf"],
                       cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "1 failed, 3 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAILED test_mine.py::test_dsv4_conformance[topk_indices-short-quick-wrong_kernels]" in r.stdout
