"""Configuration: documented defaults, errors that name the key path, env vars, upstream URLs."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from otelloop.cli import main
from otelloop.config import ConfigError, build_config, parse_upstream


def test_defaults_match_spec() -> None:
    cfg = build_config({}, env={})
    assert cfg.receiver.grpc.endpoint == "localhost:4317" and cfg.receiver.grpc.max_request_mib == 64
    assert cfg.receiver.http.endpoint == "localhost:4318" and cfg.receiver.http.max_request_mib == 64
    assert cfg.receiver.auth.bearer_tokens == []
    assert cfg.exporter.endpoint is None and cfg.exporter.protocol == "grpc"
    assert cfg.exporter.compression == "gzip" and cfg.exporter.timeout == 10.0
    assert cfg.exporter.queue_spans == 100_000 and cfg.exporter.persistent_dir is None
    assert cfg.admin.endpoint == "localhost:9464" and cfg.admin.token is None
    assert (cfg.state.group_by, cfg.state.max_sessions, cfg.state.idle_timeout) == ("auto", 100_000, 1800.0)
    assert set(cfg.detectors) == {"divergence", "rate", "drift", "entropy", "stall", "trajectory"}
    assert all(d.enabled for d in cfg.detectors.values())


@pytest.mark.parametrize("raw, expected", [
    ({"detectors": {"entropy": {"window": "x"}}}, 'detectors.entropy.window: must be an integer >= 1, got "x"'),
    ({"state": {"max_sessions": 0}}, "state.max_sessions: must be an integer >= 1, got 0"),
    ({"state": {"idle_timeout": "soon"}}, 'state.idle_timeout: must be a duration like 30s, 10m or 1h'),
    ({"state": {"group_by": "user"}}, 'state.group_by: must be one of "auto", "trace", "session", got "user"'),
    ({"receiver": {"grpc": {"endpoint": "nowhere"}}}, "receiver.grpc.endpoint: must be host:port"),
    ({"receiver": {"grpc": {"bogus": 1}}}, "receiver.grpc.bogus: unknown key"),
    ({"surprise": True}, "surprise: unknown key"),
    ({"detectors": {"nope": {}}}, "detectors.nope: unknown detector"),
    ({"exporter": {"endpoint": "ftp://x:1"}}, "exporter.endpoint: unsupported scheme 'ftp'"),
    ({"exporter": {"compression": "zstd"}}, 'exporter.compression: must be one of "gzip", "none", got "zstd"'),
    ({"pricing": {"gpt-4o": {"input_per_mtok": -1}}}, "pricing.gpt-4o.input_per_mtok: must be a number >= 0"),
], ids=["type", "range", "duration", "enum", "endpoint", "unknown-nested", "unknown-top", "unknown-detector",
        "upstream-scheme", "compression", "pricing"])
def test_errors_name_the_key_path(raw: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config(raw, env={})
    assert any(line.startswith(expected) for line in e.value.errors), e.value.errors


def test_all_errors_reported_at_once() -> None:
    with pytest.raises(ConfigError) as e:
        build_config({"state": {"max_sessions": -1}, "admin": {"bogus": 1}, "detectors": {"rate": {"x": 1}}}, env={})
    assert len(e.value.errors) == 3


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("10m", 600), ("1h", 3600), ("250ms", 0.25), (5, 5)])
def test_durations(text: object, seconds: float) -> None:
    assert build_config({"state": {"idle_timeout": text}}, env={}).state.idle_timeout == seconds


@pytest.mark.parametrize("url, protocol, expected", [
    ("collector:4317", "grpc", ("grpc", "collector:4317", False)),
    ("grpc://collector:4317", "grpc", ("grpc", "collector:4317", False)),
    ("grpcs://collector:4317", "grpc", ("grpc", "collector:4317", True)),
    ("http://phoenix:6006", "grpc", ("http/protobuf", "http://phoenix:6006/v1/traces", False)),
    ("https://lf.example/api/public/otel/v1/traces", "grpc",
     ("http/protobuf", "https://lf.example/api/public/otel/v1/traces", True)),
    ("phoenix:6006", "http/protobuf", ("http/protobuf", "http://phoenix:6006/v1/traces", False)),
])
def test_upstream_urls(url: str, protocol: str, expected: tuple) -> None:
    assert parse_upstream(url, protocol) == expected


def test_otlp_env_vars_signal_specific_wins() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://generic:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/custom",
           "OTEL_EXPORTER_OTLP_HEADERS": "api-key=secret,x-team=a%20b", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
           "OTEL_EXPORTER_OTLP_COMPRESSION": "none"}
    ex = build_config({}, env=env).exporter
    assert ex.endpoint == "http://traces:4318/custom" and ex.protocol == "http/protobuf"
    assert ex.headers == {"api-key": "secret", "x-team": "a b"}
    assert ex.timeout == 2.5 and ex.compression == "none"


def test_otlp_env_generic_endpoint_gets_signal_path_and_file_wins() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://generic:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    assert build_config({}, env=env).exporter.endpoint == "http://generic:4318/v1/traces"
    file_wins = build_config({"exporter": {"endpoint": "grpc://mine:4317"}}, env=env).exporter
    assert file_wins.endpoint == "grpc://mine:4317"


def test_rate_thresholds_accept_infinity() -> None:
    cfg = build_config({"detectors": {"rate": {"cost_usd_per_second": float("inf")}}}, env={})
    assert math.isinf(cfg.detectors["rate"].cost_usd_per_second)


def test_check_config_prints_effective_config_and_masks_secrets(tmp_path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("exporter:\n  endpoint: grpc://up:4317\n  headers: {api-key: hunter2}\nadmin: {token: s3cret}\n")
    result = CliRunner().invoke(main, ["check-config", str(f)])
    assert result.exit_code == 0, result.output
    assert "grpc://up:4317" in result.output and "max_sessions: 100000" in result.output
    assert "hunter2" not in result.output and "s3cret" not in result.output
    assert "hold_stopped_sessions: true" in result.output  # unset, resolved: on under the default profile


def test_check_config_prints_the_hold_as_it_applies_under_the_seed_profile(tmp_path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("detectors: {profile: seed}\n")
    result = CliRunner().invoke(main, ["check-config", str(f)])
    assert result.exit_code == 0, result.output
    assert "hold_stopped_sessions: false" in result.output


def test_check_config_rejects_with_key_path(tmp_path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("detectors:\n  entropy: {window: x}\n")
    result = CliRunner().invoke(main, ["check-config", str(f)])
    assert result.exit_code == 2
    assert 'detectors.entropy.window: must be an integer >= 1, got "x"' in result.output


def test_listeners_are_loopback_by_default_and_listen_host_variable_replaces_only_the_default(tmp_path) -> None:
    from otelloop.config import load_config

    default = load_config(None, env={})
    assert {default.receiver.grpc.endpoint, default.receiver.http.endpoint, default.admin.endpoint} == {
        "localhost:4317", "localhost:4318", "localhost:9464"}
    wildcard = load_config(None, env={"OTELLOOP_LISTEN_HOST": "0.0.0.0"})
    assert (wildcard.receiver.grpc.endpoint, wildcard.receiver.http.endpoint, wildcard.admin.endpoint) == (
        "0.0.0.0:4317", "0.0.0.0:4318", "0.0.0.0:9464")
    f = tmp_path / "c.yaml"
    f.write_text("receiver:\n  grpc: {endpoint: '127.0.0.1:5317'}\n")
    mixed = load_config(f, {"admin.endpoint": "127.0.0.1:0"}, env={"OTELLOOP_LISTEN_HOST": "0.0.0.0"})
    assert mixed.receiver.grpc.endpoint == "127.0.0.1:5317"  # the file wins
    assert mixed.admin.endpoint == "127.0.0.1:0"  # a flag wins
    assert mixed.receiver.http.endpoint == "0.0.0.0:4318"


@pytest.mark.parametrize("raw, expected", [
    ({"pricing": {"gpt-4o": {"input": 2.5, "output_per_mtok": 10}}},
     "pricing.gpt-4o.input: unknown key (did you mean input_per_mtok?)"),
    ({"state": {"max_sesions": 5}}, "state.max_sesions: unknown key (did you mean max_sessions?)"),
    ({"detectors": {"entropy": {"windw": 3}}}, "detectors.entropy.windw: unknown key (did you mean window?)"),
    ({"receiver": {"grpc": {"bogus": 1}}}, "receiver.grpc.bogus: unknown key"),  # nothing close: no guess
])
def test_a_misspelt_key_is_answered_with_the_nearest_valid_one(raw: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config(raw, env={})
    assert e.value.errors == [expected]


@pytest.mark.parametrize("url, ok", [
    ("http://jaeger:16686/trace/{trace_id}", True),
    ("https://phoenix/projects/x/sessions/{session_id}?t={trace_id}", True),
    ("http://jaeger:16686/trace/{traceid}", False),
    ("http://tempo/{trace_id}/{span}", False),
])
def test_trace_url_placeholders_are_checked(url: str, ok: bool) -> None:
    if ok:
        assert build_config({"console": {"trace_url": url}}, env={}).console.trace_url == url
        return
    with pytest.raises(ConfigError) as e:
        build_config({"console": {"trace_url": url}}, env={})
    [line] = e.value.errors
    assert line.startswith("console.trace_url: unknown placeholder {")
    assert "known: {trace_id}, {session_id}" in line
    if "{traceid}" in url:
        assert "{traceid} (did you mean {trace_id}?)" in line


def test_check_config_prints_the_suggestion_and_exits_2(tmp_path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("pricing:\n  gpt-4o: {input: 2.5}\nconsole: {trace_url: 'http://j/{traceid}'}\n")
    result = CliRunner().invoke(main, ["check-config", str(f)])
    assert result.exit_code == 2
    assert "pricing.gpt-4o.input: unknown key (did you mean input_per_mtok?)" in result.output
    assert "unknown placeholder {traceid} (did you mean {trace_id}?)" in result.output


def test_detector_sections_are_validated_without_config_importing_a_detector() -> None:
    """``otelloop.config`` finds the detectors' sections the way plugins are found: in a fresh interpreter
    that imported nothing else, a detector's section is validated by its own model, with its profile."""
    code = textwrap.dedent("""
        import sys
        from otelloop.config import build_config
        assert "otelloop.detectors" not in sys.modules
        config = build_config({"detectors": {"profile": "seed", "rate": {"min_elapsed": "7s"}}}, env={})
        from otelloop.detectors.registry import registered
        rate = config.detector("rate")
        print(type(rate).__module__, rate.min_elapsed, rate.min_steps, list(config.detectors) == list(registered()))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["otelloop.detectors.rate", "7.0", "1", "True"]


def test_a_registered_detector_has_a_section_until_unregistered() -> None:
    from typing import ClassVar

    from otelloop.detector_config import DetectorConfig, sections
    from otelloop.detectors.base import Detector
    from otelloop.detectors.registry import register, unregister

    class Probe(Detector):
        name: ClassVar[str] = "probe_section"

        class Config(DetectorConfig):
            """Attributes:
                level: a number. Default: 1."""

            level: int = 1

        profiles: ClassVar[dict[str, dict[str, object]]] = {"seed": {"level": 2}}

        def new_state(self) -> None:
            return None

        def observe(self, state: object, step: object, ctx: object) -> None:
            return None

    register(Probe)
    try:
        assert sections()["probe_section"].model is Probe.Config
        assert build_config({"detectors": {"profile": "seed"}}, env={}).detector("probe_section").level == 2
        with pytest.raises(ConfigError, match=r"detectors\.probe_section\.level"):
            build_config({"detectors": {"probe_section": {"level": "x"}}}, env={})
    finally:
        unregister("probe_section")
    assert "probe_section" not in sections()
    with pytest.raises(ConfigError, match=r"detectors\.probe_section: unknown detector"):
        build_config({"detectors": {"probe_section": {}}}, env={})
