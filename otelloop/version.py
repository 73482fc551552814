"""Which build is running: the package version, with the git commit it was built from when known.

An operator comparing two replicas, or a bug report against a build from a branch, needs the commit,
not only ``0.1.0``. It is found, in order: in ``_commit.txt`` next to this module, written when a wheel
or an install is built (``setup.py``, from ``OTELLOOP_BUILD_COMMIT`` or the checkout's git); else, when
otelloop runs from a git checkout, by asking git once. Without either the version stands alone. The
commit is carried as a PEP 440 local version label (``0.1.0+g1a2b3c4d5e6f``), so every place that shows
the version (``--version``, ``otelloop_build_info{version}``, the startup log) carries it with no extra
metric label.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

from otelloop import __version__

#: Written into built packages by setup.py; absent in a source checkout.
COMMIT_FILE = Path(__file__).with_name("_commit.txt")
#: The directory above the package: a git checkout when otelloop runs from its sources.
CHECKOUT = Path(__file__).resolve().parent.parent
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def _from_git(checkout: Path) -> str | None:
    """The checkout's abbreviated HEAD commit, or None when ``checkout`` is no git checkout or git is
    missing (a worktree's ``.git`` is a file, hence ``exists``)."""
    if not (checkout / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_commit(commit_file: Path = COMMIT_FILE, checkout: Path = CHECKOUT) -> str | None:
    """The commit this build came from, or None when unknown."""
    text = commit_file.read_text().strip() if commit_file.is_file() else _from_git(checkout) or ""
    return text[:12] if _COMMIT.fullmatch(text) else None


def with_commit(version: str, commit: str | None) -> str:
    """``0.1.0`` and ``1a2b3c4d`` → ``0.1.0+g1a2b3c4d`` (``g`` for git, as ``git describe`` marks it)."""
    return f"{version}+g{commit}" if commit else version


@functools.cache
def full_version() -> str:
    """The running build's version, with its commit when known (looked up once per process)."""
    return with_commit(__version__, find_commit())
