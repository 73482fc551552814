"""The running build names its version and, when known, the git commit it came from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from otelloop import __version__
from otelloop.version import find_commit, with_commit

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_commit_file_written_at_build_time_wins(tmp_path: Path) -> None:
    (tmp_path / "_commit.txt").write_text("1a2b3c4d5e6f\n")
    assert find_commit(tmp_path / "_commit.txt", tmp_path) == "1a2b3c4d5e6f"
    (tmp_path / "_commit.txt").write_text("not a commit\n")
    assert find_commit(tmp_path / "_commit.txt", tmp_path) is None


def test_a_git_checkout_is_asked_at_run_time(tmp_path: Path) -> None:
    _git("init", "-q", cwd=tmp_path)
    (tmp_path / "f").write_text("x")
    _git("add", "f", cwd=tmp_path)
    _git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "x", cwd=tmp_path)
    head = _git("rev-parse", "--short=12", "HEAD", cwd=tmp_path)
    assert find_commit(tmp_path / "missing.txt", tmp_path) == head


def test_no_checkout_or_no_git_gives_the_bare_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_commit(tmp_path / "missing.txt", tmp_path) is None
    (tmp_path / ".git").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # git not installed
    assert find_commit(tmp_path / "missing.txt", tmp_path) is None
    assert with_commit("0.1.0", None) == "0.1.0"
    assert with_commit("0.1.0", "1a2b3c4") == "0.1.0+g1a2b3c4"


def test_version_flag_and_build_info_carry_the_checkouts_commit() -> None:
    head = _git("rev-parse", "--short=12", "HEAD", cwd=REPO)
    out = subprocess.run([sys.executable, "-m", "otelloop", "--version"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith(f"otelloop {__version__}+g{head} ")
    code = ("from prometheus_client import generate_latest; from otelloop.telemetry import Metrics; "
            "m = Metrics(); print(generate_latest(m.registry).decode())")
    metrics = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert f'otelloop_build_info{{version="{__version__}+g{head}"}} 1.0' in metrics.stdout


def test_a_built_package_carries_the_commit_it_was_built_from(tmp_path: Path) -> None:
    env = dict(os.environ, OTELLOOP_BUILD_COMMIT="0123456789abcdef0123")
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)], cwd=REPO,
                   env=env, capture_output=True, check=True, timeout=120)
    assert (tmp_path / "otelloop" / "_commit.txt").read_text().strip() == "0123456789ab"
    assert find_commit(tmp_path / "otelloop" / "_commit.txt", tmp_path) == "0123456789ab"
