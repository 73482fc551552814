"""Builds otelloop's native reader (``otelloop._scan``), key search (``otelloop._keys``) and progress tracker
(``otelloop._progress``); everything else is in pyproject.toml.

The extension is optional for ``pip install``: where no C compiler is available the install still
succeeds and otelloop uses the pure-Python reader, which gives the same results more slowly
(``otelloop --version`` says which reader runs). ``OTELLOOP_REQUIRE_NATIVE=1`` makes it mandatory, so
that a build which must ship the native reader (the container image, see ``scripts/build_wheel.sh``)
fails instead of silently falling back.
"""

import os
import re
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

REQUIRE_NATIVE = os.environ.get("OTELLOOP_REQUIRE_NATIVE", "") not in ("", "0")



def build_commit() -> str:
    """The commit being built: ``OTELLOOP_BUILD_COMMIT`` (a container build has no ``.git``), else the
    checkout's HEAD; empty when neither is known."""
    commit = os.environ.get("OTELLOOP_BUILD_COMMIT", "").strip()
    if not commit and Path(".git").exists():
        try:
            commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                                    timeout=10, check=False).stdout.strip()
        except OSError:
            commit = ""
    return commit[:12] if re.fullmatch(r"[0-9a-f]{7,40}", commit) else ""


class BuildPyWithCommit(build_py):
    """Writes ``otelloop/_commit.txt`` into the built package, so that an installed otelloop names the
    commit it came from (``otelloop --version``, ``otelloop_build_info``, the startup log)."""

    def run(self) -> None:
        super().run()
        commit = build_commit()
        if commit and not self.dry_run:
            Path(self.build_lib, "otelloop", "_commit.txt").write_text(commit + "\n")


setup(cmdclass={"build_py": BuildPyWithCommit},
      ext_modules=[Extension(name, [source], optional=not REQUIRE_NATIVE, extra_compile_args=["-O2", "-std=c11"])
                   for name, source in (("otelloop._scan", "otelloop/_scan.c"), ("otelloop._keys", "otelloop/_keys.c"),
                                        ("otelloop._progress", "otelloop/_progress.c"))])
