"""``-h`` is ``--help``; every command's help says its exit codes (and ``analyze`` its file formats)."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMANDS = ["serve", "check-config", "analyze", "demo"]


def _help(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otelloop", *args], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)])
def test_dash_h_is_help(command: list[str]) -> None:
    short, long = _help(*command, "-h"), _help(*command, "--help")
    assert short.returncode == long.returncode == 0, short.stderr
    assert short.stdout == long.stdout and "Usage: " in short.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_says_its_exit_codes(command: str) -> None:
    text = _help(command, "-h").stdout
    assert "Exit codes:" in text
    codes = [line.split()[0] for line in text.split("Exit codes:")[1].splitlines()
             if line.strip()[:1].isdigit()]
    assert "0" in codes and len(codes) >= 2, text


def test_analyze_help_names_the_file_formats() -> None:
    text = _help("analyze", "-h").stdout
    for words in ("file exporter's proto format", "JSON lines", "OTLP/JSON document",
                  "binary ExportTraceServiceRequest"):
        assert words in text
    assert "3  the input holds no agent step" in text
