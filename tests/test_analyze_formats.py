"""``otelloop analyze`` reads the OpenTelemetry Collector file exporter's output: its ``proto`` format
(every ``ExportTraceServiceRequest`` preceded by its length, 4 bytes big-endian) and its JSON lines,
besides a bare binary request; truncated or garbled files are refused with the file and the offset.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from otelloop.analyze import InputError, analyze, iter_requests, read_requests
from otelloop.otlp.json_codec import request_to_json

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = ROOT / "benchmarks" / "corpus"
RECORDED = ("langgraph_openinference", "langgraph_langsmith", "openai_agents", "openllmetry_openai")


def _requests() -> list[bytes]:
    """Real export requests of four agent frameworks (each fixture is one recorded request)."""
    return [(FIXTURES / f"{name}.pb").read_bytes() for name in RECORDED]


def _file_exporter_proto(requests: list[bytes]) -> bytes:
    """What the Collector's file exporter writes with ``format: proto``: length (uint32 big-endian) + bytes."""
    return b"".join(struct.pack(">I", len(r)) + r for r in requests)


def _summary(reports: list) -> list[tuple]:
    return sorted((r.session_id, r.steps, r.verdict, r.reason, len(r.findings),
                   tuple(sorted((f["detector"], f["event"], f["span_id"]) for f in r.findings))) for r in reports)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otelloop", "analyze", *args], capture_output=True, text=True,
                          timeout=120)


def test_file_exporter_proto_format_gives_the_requests_back_in_order(tmp_path: Path) -> None:
    requests = _requests()
    path = tmp_path / "traces.binpb"
    path.write_bytes(_file_exporter_proto(requests))
    assert list(read_requests(path)) == requests
    wheres = [w for w, _ in iter_requests(path)]
    assert wheres[1] == f"{path}: request 2 at offset {4 + len(requests[0])}"


def test_proto_and_json_lines_and_bare_requests_give_the_same_findings(tmp_path: Path) -> None:
    requests = _requests()
    framed = tmp_path / "traces.binpb"
    framed.write_bytes(_file_exporter_proto(requests))
    lines = tmp_path / "traces.jsonl"
    lines.write_text("".join(json.dumps(request_to_json(r)) + "\n" for r in requests))
    bare = []
    for i, r in enumerate(requests):
        p = tmp_path / f"request{i}.pb"
        p.write_bytes(r)
        bare.append(str(p))
    from_proto = _summary(analyze([str(framed)]))
    assert from_proto, "the recorded requests hold agent sessions"
    assert any(n for *_, n, _ in from_proto), "the recorded loops produce findings"
    assert _summary(analyze([str(lines)])) == from_proto
    assert _summary(analyze(bare)) == from_proto


@pytest.mark.parametrize("cut", ["inside a request", "inside a length prefix"])
def test_a_truncated_file_names_the_file_and_offset(tmp_path: Path, cut: str) -> None:
    requests = _requests()
    data = _file_exporter_proto(requests)
    second = 4 + len(requests[0])
    end = second + 4 + len(requests[1]) // 2 if cut == "inside a request" else second + 2
    path = tmp_path / "cut.binpb"
    path.write_bytes(data[:end])
    with pytest.raises(InputError, match=rf"{path.name}: truncated at offset {second}: request 2"):
        list(iter_requests(path))
    proc = _cli(str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"truncated at offset {second}" in proc.stderr and str(path) in proc.stderr
    assert proc.stdout == ""  # nothing half-analysed


def test_a_garbled_file_is_refused(tmp_path: Path) -> None:
    requests = _requests()
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x7fELF" + requests[0])
    with pytest.raises(InputError, match=r"junk.bin: not OTLP: offset 0 holds 0x7f"):
        list(iter_requests(junk))
    # a framed file whose second prefix is corrupted: a huge length, or bytes that are not a request
    first = 4 + len(requests[0])
    data = bytearray(_file_exporter_proto(requests[:3]))
    data[first + 4] = 0x12  # request 2 no longer begins with the resource_spans tag
    bad = tmp_path / "bad.binpb"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputError, match=rf"bad.binpb: garbled at offset {first + 4}: request 2"):
        list(iter_requests(bad))
    huge = bytearray(_file_exporter_proto(requests[:2]))
    huge[first:first + 4] = b"\x00\xff\xff\xff"
    big = tmp_path / "big.binpb"
    big.write_bytes(bytes(huge))
    with pytest.raises(InputError, match=rf"truncated at offset {first}: request 2 announces 16777215 bytes"):
        list(iter_requests(big))


def test_a_request_that_does_not_decode_names_its_offset(tmp_path: Path) -> None:
    requests = _requests()
    broken = b"\x0a\x05\x0a\x03\x0a\x01"  # resource_spans whose nested length runs past its end
    path = tmp_path / "broken.binpb"
    path.write_bytes(_file_exporter_proto([requests[0], broken]))
    with pytest.raises(InputError, match=rf"broken.binpb: request 2 at offset {4 + len(requests[0])}: cannot decode"):
        analyze([str(path)])


def _corpus_run(pred) -> Path:  # type: ignore[no-untyped-def]
    """The first corpus run recorded with deterministic tools (not a noisy run: those carry ``versions``,
    and their repeated results differ by per-call noise) that ``pred`` accepts."""
    labels = json.loads((CORPUS / "labels.json").read_text())["runs"]
    run = next(r for r in labels if "versions" not in r and pred(r))
    return CORPUS / run["file"]


def test_fail_on_stop_over_a_corpus_loop_run() -> None:
    """A recorded run that repeats the same call with the same result a dozen times must fail the gate."""
    loop = _corpus_run(lambda r: r["scenario"] == "repeat" and r["label"] == "loop" and r["tool_calls"] >= 12)
    assert loop.read_bytes()[:1] == b"\x00", "corpus runs are in the file exporter's proto format"
    proc = _cli(str(loop), "--fail-on", "stop")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "stop" in proc.stdout
    as_json = json.loads(_cli(str(loop), "--json").stdout)
    assert [s["verdict"] for s in as_json["sessions"]] == ["stop"]


def test_fail_on_stop_passes_when_no_session_is_stopped(tmp_path: Path) -> None:
    loop = _corpus_run(lambda r: r["scenario"] == "repeat" and r["label"] == "loop" and r["tool_calls"] >= 12)
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text("detectors:\n" + "".join(f"  {d}:\n    enabled: false\n" for d in (
        "divergence", "rate", "drift", "entropy", "stall", "trajectory")))
    proc = _cli(str(loop), "--fail-on", "stop", "--config", str(quiet))
    assert proc.returncode == 0, proc.stdout + proc.stderr
