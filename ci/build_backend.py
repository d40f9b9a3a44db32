"""The package's build backend: setuptools, plus the commit a wheel is built from. build_wheel writes
`git rev-parse HEAD` of the source tree (when it is a git checkout) into harness/BUILD_COMMIT for the
wheel's duration, so an installed harness records the commit it was built from
(harness.results.harness_source); editable installs read git directly and need no file."""

import subprocess
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  every other hook as setuptools has it

STAMP = Path("harness") / "BUILD_COMMIT"


def _head():
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True)
        if Path(top.stdout.strip()).resolve() != Path.cwd().resolve():  # a tree copied inside another repository
            return None
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True).stdout.strip()
        return head.stdout.strip() + (" dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):  # no git, or an sdist: nothing to record
        return None


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    head = _head()
    if head:
        STAMP.write_text(head + "\n")
    try:
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    finally:
        if head:
            STAMP.unlink(missing_ok=True)
