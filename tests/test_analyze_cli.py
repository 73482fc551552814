"""``otelloop analyze`` as a CI gate and as a person reads it: fails closed on nothing to judge, a summary
line, the most severe first, a progress bar on stderr only. Real subprocesses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from spans import request, span

REPO = Path(__file__).resolve().parents[1]
CODING = REPO / "tests" / "fixtures" / "coding_session.jsonl"
SEVERITY = {"info": 0, "warn": 1, "loop": 2, "stop": 3}
VERDICT = {"continue": 0, "nudge": 1, "stop": 2, "paused": 3}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otelloop", "analyze", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, check=False)


def _stepless(tmp_path: Path) -> Path:
    f = tmp_path / "http.binpb"
    f.write_bytes(request(span("GET /", {"http.request.method": "GET"})))
    return f


@pytest.mark.parametrize("kind", ["empty", "stepless"])
def test_nothing_to_judge_fails_closed_with_a_message(tmp_path: Path, kind: str) -> None:
    if kind == "empty":
        f = tmp_path / "empty.jsonl"
        f.write_text("")
    else:
        f = _stepless(tmp_path)
    proc = _cli(str(f), "--fail-on", "stop")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"otelloop: no agent steps found in {f}" in proc.stderr and "--allow-empty" in proc.stderr
    allowed = _cli(str(f), "--fail-on", "stop", "--allow-empty")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.splitlines()[-1] == "0 sessions: none"


def test_summary_line_and_most_severe_first(tmp_path: Path) -> None:
    proc = _cli(str(CODING))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "2 sessions: 1 stop, 1 continue"
    sessions = [ln.split()[3] for ln in lines[1:-1] if not ln.startswith(" ")]
    assert sessions == sorted(sessions, key=VERDICT.__getitem__, reverse=True) == ["stop", "continue"]
    blocks = re.split(r"\n(?=\S)", proc.stdout)
    for block in blocks:
        severities = re.findall(r"^    \[(\w+)\]", block, re.MULTILINE)
        assert severities == sorted(severities, key=SEVERITY.__getitem__, reverse=True), block
    assert any("[stop]" in b and "[warn]" in b for b in blocks)  # an ordering that could have gone wrong
    as_json = json.loads(_cli(str(CODING), "--json").stdout)
    assert as_json["summary"] == {"sessions": 2, "verdicts": {"stop": 1, "continue": 1}}
    assert list(as_json["summary"]["verdicts"]) == ["stop", "continue"]


def test_progress_bar_goes_to_stderr_only_and_only_when_asked_or_on_a_terminal() -> None:
    forced = _cli(str(CODING), "--progress", "--json")
    assert forced.returncode == 0
    json.loads(forced.stdout)  # stdout stays machine-readable
    bars = [ln for ln in forced.stderr.splitlines() if ln.startswith("analyzing [")]
    assert bars and "100%" in bars[-1], forced.stderr
    assert len(bars) <= 11  # not a terminal: a line per tenth at most
    quiet = _cli(str(CODING))  # small input, stderr not a terminal: no bar
    assert "analyzing [" not in quiet.stderr


def test_progress_bar_redraws_one_line_on_a_terminal() -> None:
    import io

    from otelloop.progressbar import ProgressBar, wanted

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    assert wanted(None, 200 << 20, out) and not wanted(None, 1 << 20, out)
    assert not wanted(None, 200 << 20, io.StringIO())
    bar = ProgressBar(1000, out, tty=True)
    bar(500)
    bar.close(1000)
    assert out.getvalue().count("\n") == 1 and out.getvalue().startswith("\ranalyzing [")
    assert "100%" in out.getvalue().rsplit("\r", 1)[1]
