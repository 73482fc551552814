"""Configuration: one YAML file, validated before any port opens (docs/configuration.md).

Precedence: command-line flags > the YAML file > ``OTEL_EXPORTER_OTLP_TRACES_*`` > ``OTEL_EXPORTER_OTLP_*``
> defaults. Every field is documented with its default. Errors name the full key path, e.g.
``detectors.entropy.window: must be an integer >= 1, got "x"``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from otelloop.bounds import DEFAULT_MAX_STRING_BYTES, MIN_STRING_BYTES
from otelloop.detector_config import DetectorConfig, sections
from otelloop.units import Duration, PositiveDuration, parse_duration  # noqa: F401  (re-exported)

#: Detector profiles: ``default`` is tuned to tell loops from progress on real agent traces; ``seed``
#: keeps the strict rules that count repetition whatever its results (see docs/detectors.md#profiles).
PROFILES: tuple[str, ...] = ("default", "seed")
DEFAULT_PROFILE = "default"


class ConfigError(ValueError):
    """The configuration is invalid. ``errors`` lists one ``key.path: reason`` line per problem."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors))




def split_host_port(value: str) -> tuple[str, int]:
    """``"host:port"`` → (host, port); raises ValueError with a readable reason."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"must be host:port with a port 0-65535, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _host_port(value: str) -> str:
    split_host_port(value)
    return value


#: A listen address, checked when the configuration is read rather than when the listener starts.
HostPort = Annotated[str, AfterValidator(_host_port)]


class Secret:
    """Marks a field that holds credentials (``Annotated[str | None, SECRET]``).

    ``check-config`` shows such a value as ``***`` (each item of a list, each value of a mapping), and a
    validation error names its key without quoting it. Marking the field is all a new credential needs:
    :func:`effective_config` and the error messages find the marks, and
    ``tests/robustness/test_check_config_secrets.py`` fails when a field with a credential-like name is
    left unmarked.
    """

    def __repr__(self) -> str:
        return "SECRET"


class SecretInUrl(Secret):
    """Marks a URL field that may carry credentials: the password of its user info and the values of its
    query are masked (``https://user:***@host/v1/traces?key=***``), the rest is shown."""

    def __repr__(self) -> str:
        return "SECRET_IN_URL"


SECRET = Secret()
SECRET_IN_URL = SecretInUrl()



class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EndpointConfig(_Section):
    """One listener: its address and the largest request it accepts.

    Attributes:
        endpoint: ``host:port`` to listen on; port 0 picks a free port.
        max_request_mib: request size limit after decompression, in MiB.
    """

    endpoint: HostPort
    max_request_mib: float = Field(64, gt=0)


class GrpcEndpointConfig(EndpointConfig):
    """The OTLP/gRPC listener (``TraceService/Export``).

    Attributes:
        endpoint: ``host:port`` to listen on; port 0 picks a free port. Loopback by default, like the
            OpenTelemetry Collector; set ``0.0.0.0:4317`` where other hosts or pods must reach it (the
            variable ``OTELLOOP_LISTEN_HOST`` replaces ``localhost`` in all three listeners' defaults).
            Default: ``localhost:4317``.
        max_request_mib: request size limit after decompression, in MiB; a larger request gets
            ``RESOURCE_EXHAUSTED``.
    """

    endpoint: HostPort = "localhost:4317"


class HttpEndpointConfig(EndpointConfig):
    """The OTLP/HTTP listener (``POST /v1/traces``, protobuf or JSON, optionally gzip).

    Attributes:
        endpoint: ``host:port`` to listen on; port 0 picks a free port. Loopback by default, like the
            OpenTelemetry Collector; set ``0.0.0.0:4318`` where other hosts or pods must reach it.
            Default: ``localhost:4318``.
        max_request_mib: request size limit after decompression, in MiB (HTTP 413 beyond it; gzip bodies
            are cut off at the limit, never inflated whole; a body of several gzip members counts as
            their contents together). Default: 64.
        read_header_timeout: a connection whose request headers are not complete this long after it
            opened, or after the previous response on it, is closed; this is also how long an idle
            keep-alive connection stays open (the admin listener uses the same value). Default: 30s.
        read_body_timeout: a request body not received whole this long after its headers is answered
            408 and its connection closed (counted in ``otelloop_requests_aborted_total``). Default: 60s.
    """

    endpoint: HostPort = "localhost:4318"
    read_header_timeout: PositiveDuration = 30.0
    read_body_timeout: PositiveDuration = 60.0


class AuthConfig(_Section):
    """Bearer-token authentication of both OTLP receivers.

    A request must carry ``Authorization: Bearer <token>`` with one of the accepted tokens, which are
    those of all three settings together; when none is configured the receivers accept every request.
    Tokens are compared in constant time and never logged.

    Attributes:
        bearer_tokens: accepted tokens, listed in the configuration.
        bearer_tokens_file: a file with one accepted token per line, read at start; null: none.
        bearer_tokens_env: name of an environment variable holding accepted tokens, comma-separated,
            read at start; null: none.
    """

    bearer_tokens: Annotated[list[str], SECRET] = []
    bearer_tokens_file: str | None = None
    bearer_tokens_env: str | None = None


class TLSConfig(_Section):
    """TLS on otelloop's listeners, and client certificates (mTLS) when a client CA is given.

    The certificate serves the OTLP/gRPC, OTLP/HTTP and admin listeners alike; client certificates are
    demanded on the OTLP listeners, and on the admin listener only with ``admin.require_client_cert``.

    Attributes:
        cert_file: PEM certificate; set with ``key_file`` to serve TLS; null: plaintext.
        key_file: PEM private key of ``cert_file``.
        client_ca_file: PEM CA bundle; set to require client certificates signed by it (mTLS).
    """

    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file and self.key_file)


class ReceiverConfig(_Section):
    """The OTLP receivers: where agents and Collectors send their spans.

    Attributes:
        grpc: the OTLP/gRPC listener.
        http: the OTLP/HTTP listener.
        auth: bearer-token authentication of both listeners.
        tls: TLS (and mTLS) on the listeners.
        acknowledge: when a client gets its answer. ``received``: once the request is read and valid,
            its spans counted and room for them reserved in the export queue (about a millisecond);
            mapping, detection and enrichment follow in arrival order, and the sessions API (sessions,
            verdicts, alerts, commands) first waits for the requests received before it (up to 5 s), so
            an agent still reads a verdict that includes the steps it sent. Invalid spans are still refused in
            the answer. ``processed``: once the request is mapped, detected, enriched and in the export
            queue, so the answer takes as long as detection does (tens of milliseconds for 512 steps).
            A request answered but not yet processed is lost if the process is killed (a clean shutdown
            processes it), as the in-memory export queue's requests are; so ``received`` cannot be
            combined with ``exporter.persistent_dir``, whose requests survive a crash. ``auto``:
            ``processed`` with ``exporter.persistent_dir``, else ``received``. Read at start. Default:
            ``auto``.
        backlog_spans: with ``acknowledge: received``, how many spans answered on receipt may wait for
            processing; while that many wait, clients are asked to retry (a request is taken whatever
            its size while fewer wait). At about 0.1 ms a span with every detector on, the default is
            under two seconds of work. Read at start. Default: 16384.
    """

    grpc: GrpcEndpointConfig = GrpcEndpointConfig()
    http: HttpEndpointConfig = HttpEndpointConfig()
    auth: AuthConfig = AuthConfig()
    tls: TLSConfig = TLSConfig()
    acknowledge: Literal["auto", "processed", "received"] = "auto"
    backlog_spans: int = Field(16_384, ge=1)


class ExporterTLSConfig(_Section):
    """TLS towards the upstream.

    Attributes:
        insecure: force plaintext (true) or TLS (false); null: as the endpoint's scheme says (TLS for
            ``grpcs://`` and ``https://``).
        ca_file: PEM CA bundle to verify the upstream (private CAs); null: the system's roots.
        cert_file: client certificate for mTLS to the upstream.
        key_file: client key for mTLS to the upstream.
    """

    insecure: bool | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


class ExporterConfig(_Section):
    """The upstream OTLP backend that receives the enriched spans; without an endpoint otelloop only detects.

    Accepted requests wait in a bounded queue (in memory, or on disk with ``persistent_dir``) and are
    retried with exponential backoff until the upstream takes them or rejects them for good.

    Attributes:
        endpoint: ``grpc://host:port``, ``host:port`` (gRPC), ``grpcs://host:port`` (gRPC with TLS) or
            ``http(s)://host:port[/path]`` (OTLP/HTTP protobuf; ``/v1/traces`` unless a path is given);
            null: nothing is forwarded (detect only).
        protocol: ``grpc`` or ``http/protobuf``; the endpoint's scheme decides when it has one.
        headers: extra request headers (gRPC metadata), e.g. an API key. Never logged.
        compression: ``gzip`` or ``none``.
        timeout: deadline of one export attempt.
        queue_spans: capacity of the export queue in spans; when full, clients are asked to retry.
        persistent_dir: directory of a SQLite-backed queue that survives restarts and crashes; a request
            is acknowledged to the client only once it is on disk; null: the queue is in memory.
        persistent_max_mib: size bound of the persistent queue in MiB of queued requests, besides
            ``queue_spans``; when either is reached clients are asked to retry. Default: 1024.
        max_request_mib: the largest request the upstream accepts, in MiB; every upstream request is cut to
            fit, at resource, scope and span boundaries, after enrichment. Measured on the serialised
            request before compression, which is what gRPC servers limit (the decompressed message; an
            OpenTelemetry Collector's default is 4 MiB); OTLP/HTTP servers limit the body as sent, which is
            never larger (with gzip, the bound leaves room for gzip's worst-case framing). A span too large
            to fit even alone is refused to its client before acknowledgement (partial success), or
            forwarded without otelloop's additions when only those make it too large. Default: 4.
        max_batch_mib: queued requests are coalesced into one upstream request up to this size (and never
            beyond ``max_request_mib``). Default: 4.
        retry_initial_interval: first backoff. Default: 1s.
        retry_max_interval: backoff cap. Default: 30s.
        shutdown_grace: how long SIGTERM waits for the queue to drain. Default: 30s.
        tls: TLS settings towards the upstream. Default: plaintext unless the endpoint is ``grpcs://`` or
            ``https://``.
    """

    endpoint: Annotated[str | None, SECRET_IN_URL] = None
    protocol: Literal["grpc", "http/protobuf"] = "grpc"
    headers: Annotated[dict[str, str], SECRET] = {}
    compression: Literal["gzip", "none"] = "gzip"
    timeout: PositiveDuration = 10.0
    queue_spans: int = Field(100_000, ge=1)
    persistent_dir: str | None = None
    persistent_max_mib: float = Field(1024, gt=0)
    max_request_mib: float = Field(4, gt=0, le=2047)
    max_batch_mib: float = Field(4, gt=0)
    retry_initial_interval: Duration = 1.0
    retry_max_interval: Duration = 30.0
    shutdown_grace: Duration = 30.0
    tls: ExporterTLSConfig = ExporterTLSConfig()


class AdminConfig(_Section):
    """Admin HTTP listener: ``/metrics``, ``/healthz``, ``/readyz``, the sessions API, the event stream and
    the console. See docs/console.md for who may read what.

    Attributes:
        endpoint: ``host:port``; loopback by default (set ``0.0.0.0:9464`` for probes and scraping from
            outside the host or pod). Default: ``localhost:9464``.
        token: the admin token. When set, every read of session data (``/v1/sessions``, one session,
            ``/v1/alerts``, ``/v1/events``) and pause/resume need it as ``Authorization: Bearer``; the
            console asks for it once per browser tab. Default: null.
        token_file: file holding that token (takes precedence over ``token``). Default: null.
        token_env: name of an environment variable holding that token (takes precedence over both).
            Default: null.
        agent_token: token agents present to read ``/v1/sessions/{id}/verdict`` with its message. When
            set, the verdict endpoint needs it (or the admin token); when not set, the verdict endpoint
            answers every client but gives the session-specific message only to clients allowed to read
            session data, and a fixed message without agent content to the others. Default: null.
        agent_token_file: file holding the agent token (takes precedence over ``agent_token``). Default: null.
        agent_token_env: environment variable holding the agent token (takes precedence over both).
            Default: null.
        allow_remote_without_token: with no admin token, serve session data and pause/resume to every
            client that reaches the listener; when false they answer loopback clients only (``/healthz``,
            ``/readyz`` and ``/metrics`` are always open). Default: false.
        read_localhost_only: serve session data only to loopback clients, even with the admin token.
            Default: false.
        require_client_cert: when ``receiver.tls`` has a client CA, demand client certificates on the admin
            listener too (off so that kubelet probes and Prometheus can reach ``/healthz`` and ``/metrics``
            over plain TLS). Default: false.
        max_event_clients: concurrent ``/v1/events`` streams (open console pages and other consumers);
            one more is answered 503. Default: 32.
        event_buffer_kib: events buffered for one stream client that reads too slowly; a client that
            falls this far behind is disconnected (it reconnects and reloads). Default: 1024.
        event_rate_kib: the event stream's byte budget: KiB per second it sends to all its clients
            together. Each flush hands every client the same events, cut to this budget divided among the
            clients connected (at least 4 KiB per flush); what does not fit is counted in
            ``otelloop_event_stream_events_lost_total`` and clients are told to reload. Default: 4096.
        max_concurrent_lists: session lists (``/v1/sessions``) computed at once; 64 times as many wait
            their turn (up to 10 s) and any more are answered 503 with ``Retry-After``. Lists share the event loop
            with the receivers and probes and run in slices, so this bounds how much of it they take.
            Default: 2.
    """

    endpoint: HostPort = "localhost:9464"
    token: Annotated[str | None, SECRET] = None
    token_file: str | None = None
    token_env: str | None = None
    agent_token: Annotated[str | None, SECRET] = None
    agent_token_file: str | None = None
    agent_token_env: str | None = None
    allow_remote_without_token: bool = False
    read_localhost_only: bool = False
    require_client_cert: bool = False
    max_event_clients: int = Field(32, ge=1, le=10_000)
    event_buffer_kib: int = Field(1024, ge=16)
    event_rate_kib: int = Field(4096, ge=64)
    max_concurrent_lists: int = Field(2, ge=1, le=64)


class ConsoleConfig(_Section):
    """The operator console: a web page on the admin listener (``/``) showing stuck sessions live.

    Attributes:
        enabled: serve the console page. The sessions API and the event stream do not depend on it.
            Default: true.
        trace_url: link from a session to its trace in your trace viewer: a URL with ``{trace_id}``
            (32 hex digits) and/or ``{session_id}`` in it, e.g. ``http://jaeger:16686/trace/{trace_id}``
            (examples for Phoenix, Jaeger and Grafana Tempo in docs/console.md); any other ``{name}`` is
            an error, with the nearest valid placeholder suggested; null shows no link.
            Default: null.
        dashboard_url: link from the console's header to your metrics dashboard (e.g. the Grafana
            dashboard the Helm chart ships); an http:// or https:// URL, null shows no link. Default: null.
        ended_after: a session unseen for this long is shown as *ended* (it is still held until
            ``state.idle_timeout``), and the console offers no Pause for it. Default: 5m.
    """

    enabled: bool = True
    trace_url: str | None = None
    dashboard_url: str | None = None
    ended_after: PositiveDuration = 300.0

    @field_validator("trace_url", "dashboard_url")
    @classmethod
    def _check_trace_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"https?://[^\s]+$", v):
            raise ValueError("must be an http:// or https:// URL")
        if v is not None:
            check_placeholders(v, TRACE_URL_PLACEHOLDERS)
        return v


#: What the console replaces in ``console.trace_url``.
TRACE_URL_PLACEHOLDERS = ("trace_id", "session_id")


def check_placeholders(template: str, known: Iterable[str]) -> None:
    """Raise ValueError naming each ``{name}`` in ``template`` that is not one of ``known``: a misspelt
    placeholder (``{traceid}``) would otherwise stay in every link, silently, and every link would 404."""
    known = tuple(known)
    unknown = [name for name in re.findall(r"\{([^{}]*)\}", template) if name not in known]
    if unknown:
        hints = [f"{{{name}}}" + (f" (did you mean {{{guess}}}?)" if (guess := nearest_key(name, known)) else "")
                 for name in unknown]
        raise ValueError(f"unknown placeholder {', '.join(hints)}; known: "
                         f"{', '.join('{' + k + '}' for k in known)}")


class StateConfig(_Section):
    """Per-session detector state: what a session is and how many are kept.

    All spans of a session must reach the same otelloop process (see docs/deploy.md#replicas): with
    several replicas, route by trace id, or by the conversation id where every span carries it.

    Attributes:
        group_by: ``auto`` (a span's conversation/session id, e.g. ``gen_ai.conversation.id`` or
            ``session.id``, when it carries one; else the conversation its trace was seen with; else its
            trace id), ``trace`` (a session is a trace) or ``session`` (the span's own conversation/session
            id, else its trace id; no joining by trace).
        max_sessions: live sessions kept; beyond it the least recently seen is evicted.
        idle_timeout: a session unseen for this long is dropped.
        hold_stopped_sessions: whether a stopped session's steps that bring nothing new are *held*: no
            detector judges them, their spans carry the loop score as it stood (entropy's window takes
            them in), no finding is raised on them and the sessions API counts them in ``held_steps``.
            An agent that ignores its stop then costs a fraction of the CPU, and its stop stands until
            an operator resumes it either way.
            false: such steps are judged like any other's, so later findings (another detector's halt,
            a further intervention) are added as evidence. Null means true, except under
            ``detectors.profile: seed``, where every detector judges every step as in its original
            design. Default: null.
    """

    group_by: Literal["auto", "trace", "session"] = "auto"
    max_sessions: int = Field(100_000, ge=1)
    idle_timeout: PositiveDuration = 1800.0
    hold_stopped_sessions: bool | None = None


class ModelPrice(_Section):
    """The price of one model, in USD per million tokens.

    Used to compute the cost of a step whose span carries token counts but no cost attribute; the key
    is the model name as the span reports it (``gen_ai.request.model`` or its equivalents).

    Attributes:
        input_per_mtok: price of a million input tokens.
        output_per_mtok: price of a million output tokens.
    """

    input_per_mtok: float = Field(0.0, ge=0)
    output_per_mtok: float = Field(0.0, ge=0)


class MappingRule(_Section):
    """An extra mapping rule: spans that match it become steps of the given kind.

    Rules are tried in order, before the built-in conventions; the first rule that matches decides.

    Attributes:
        match: attribute key → required string value (``"*"`` means "present"); all must hold.
        span_name: a regular expression the span name must match; null: any name.
        kind: the step kind to assign: ``tool``, ``llm``, ``system``, or ``ignore`` (not a step).
        name_attribute: attribute holding the step name; null: the built-in conventions decide.
        session_attribute: attribute holding the session id (``state.group_by: auto`` or ``session``); null: the
            built-in conventions decide.
        args_attribute: attribute holding the arguments; null: the built-in conventions decide.
        output_attribute: attribute holding the output; null: the built-in conventions decide.
    """

    match: dict[str, str] = {}
    span_name: str | None = None
    kind: Literal["tool", "llm", "system", "ignore"]
    name_attribute: str | None = None
    session_attribute: str | None = None
    args_attribute: str | None = None
    output_attribute: str | None = None

    @field_validator("span_name")
    @classmethod
    def _check_regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"must be a valid regular expression ({e})") from None
        return v


class ToolClassesConfig(_Section):
    """Which tools read files, write files or run commands, for the file and command steps of drift.

    Patterns are shell-style globs matched case-insensitively against the tool name; the built-in
    lists cover OpenHands, Claude Code, SWE-agent, LangChain file tools and the usual
    ``read_file``/``run_command``. A list given here replaces the built-in one of its class.

    Attributes:
        read: read-tool patterns; null: ``otelloop.mapping.tools.DEFAULT_READ``.
        write: write/edit-tool patterns; null: ``otelloop.mapping.tools.DEFAULT_WRITE``.
        exec: command-tool patterns; null: ``otelloop.mapping.tools.DEFAULT_EXEC``.
    """

    read: list[str] | None = None
    write: list[str] | None = None
    exec: list[str] | None = None


class MappingConfig(_Section):
    """How spans become agent steps, beyond the built-in conventions.

    Attributes:
        rules: extra rules, tried in order before the built-in conventions.
        tools: tool classification patterns.
        max_text_bytes: longest attribute value (as encoded) that is read, parsed and hashed in
            canonical form; longer values are neither copied nor parsed but hashed by their bytes as
            sent.
    """

    rules: list[MappingRule] = []
    tools: ToolClassesConfig = ToolClassesConfig()
    max_text_bytes: int = Field(65536, ge=64)


class EnrichConfig(_Section):
    """How findings appear on the forwarded spans, besides the ``otelloop.*`` events and attributes.

    Attributes:
        langfuse_attributes: also set ``langfuse.observation.level=WARNING`` and
            ``langfuse.observation.status_message`` on spans with findings.
    """

    langfuse_attributes: bool = False


class LimitsConfig(_Section):
    """Process protection: refuse work (retryably) before the process runs out of memory.

    Attributes:
        memory_mib: memory limit. Requests in flight may hold a quarter of it above the idle process (a
            request beyond that is refused retryably); above this resident size, refuse new requests
            (retryably), drop the process-wide caches and the least recently seen sessions only when
            state's own accounted bytes exceed the rest, and accept again once the accounted memory is
            back under 90% of it (see docs/deploy.md, "Memory"); 0 disables; null (the default): 80% of
            the container's cgroup memory limit when there is one, else no guard.
        max_string_bytes: longest string otelloop keeps from a span, in bytes (UTF-8, and in memory):
            tool, agent, node, service and model names, session ids, intents, file paths, commands and
            argument texts. A longer one is cut and ends with ``...`` and 16 hex digits of a hash of the
            whole value, so two long names that differ only at their end stay distinct. Default: 256.
    """

    memory_mib: float | None = Field(None, ge=0)
    max_string_bytes: int = Field(DEFAULT_MAX_STRING_BYTES, ge=MIN_STRING_BYTES, le=1 << 20)


class MetricsConfig(_Section):
    """Bounds of otelloop's own Prometheus series (see docs/metrics.md, "Bounded series").

    Attributes:
        max_series: series that the families labelled by service or model (steps, findings, tokens,
            cost) may hold together; beyond it a new combination is counted under ``other``. Default: 2000.
        max_label_values: distinct values kept per capped label (service, model); later ones are
            counted as ``other`` until a slot is freed. Default: 200.
        label_idle_timeout: a label value, or a series, unseen for this long gives up its slot (its
            series are removed from ``/metrics``) when a new one needs it. Default: 1h.
    """

    max_series: int = Field(2000, ge=1)
    max_label_values: int = Field(200, ge=1)
    label_idle_timeout: Duration = 3600.0


class Config(_Section):
    """The whole configuration: one YAML file whose top-level keys are these sections.

    Attributes:
        receiver: the OTLP receivers.
        exporter: the upstream that receives the enriched spans.
        admin: the admin HTTP listener (metrics, health, sessions API, event stream, console).
        console: the operator console page served by the admin listener.
        state: per-session state: what a session is and how many are kept.
        pricing: model name → price, for steps that report tokens but no cost.
        mapping: how spans become agent steps.
        enrich: how findings appear on the forwarded spans.
        limits: process protection: memory guard and the longest string kept.
        metrics: bounds of otelloop's own metric series.
        detectors: detector name → its settings; every registered detector runs with its defaults
            unless configured here (``enabled: false`` turns one off).
    """

    receiver: ReceiverConfig = ReceiverConfig()
    exporter: ExporterConfig = ExporterConfig()
    admin: AdminConfig = AdminConfig()
    console: ConsoleConfig = ConsoleConfig()
    state: StateConfig = StateConfig()
    pricing: dict[str, ModelPrice] = {}
    mapping: MappingConfig = MappingConfig()
    enrich: EnrichConfig = EnrichConfig()
    limits: LimitsConfig = LimitsConfig()
    metrics: MetricsConfig = MetricsConfig()
    #: filled with a validated configuration for every registered detector by :func:`build_config`
    detectors: dict[str, Any] = {}
    _profile: str = PrivateAttr(DEFAULT_PROFILE)

    def detector(self, name: str) -> DetectorConfig:
        config: DetectorConfig = self.detectors[name]
        return config

    @property
    def detector_profile(self) -> str:
        """``detectors.profile``: the set of detector defaults in force (``default`` or ``seed``)."""
        return self._profile

    @property
    def acknowledge(self) -> Literal["processed", "received"]:
        """``receiver.acknowledge`` as it applies: ``auto`` answers on receipt unless the export queue is
        persistent."""
        ack = self.receiver.acknowledge
        if ack == "auto":
            return "processed" if self.exporter.persistent_dir else "received"
        return ack

    @property
    def holds_stopped_sessions(self) -> bool:
        """``state.hold_stopped_sessions`` as it applies: when unset, on except under the seed profile."""
        hold = self.state.hold_stopped_sessions
        return self._profile != "seed" if hold is None else hold


# ---------------------------------------------------------------------------------------------------
# Loading and error formatting


def _json(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _field_schema(model: type[BaseModel], loc: tuple[Any, ...]) -> dict[str, Any] | None:
    """The JSON schema of the field at ``loc`` inside ``model``, if it can be found."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})
    node: dict[str, Any] = schema
    for part in loc:
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        if "allOf" in node and len(node["allOf"]) == 1:
            node = node["allOf"][0]
            while "$ref" in node:
                node = defs[node["$ref"].rsplit("/", 1)[-1]]
        if isinstance(part, int):
            node = node.get("items", {})
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def nearest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key a misspelt ``key`` most likely meant: one it abbreviates (``input`` →
    ``input_per_mtok``) or one a few edits away (``windw`` → ``window``); None when nothing is close."""
    known = sorted(known)
    lowered = key.lower().replace("-", "_")
    starts = [k for k in known if k.startswith(lowered) or lowered.startswith(k)]
    if len(starts) == 1:
        return starts[0]
    close = difflib.get_close_matches(lowered, known, n=1, cutoff=0.6)
    return close[0] if close else (starts[0] if starts else None)


def did_you_mean(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """`` (did you mean input_per_mtok?)`` for an unknown key at ``loc``, or '' when no key is close."""
    if not loc or not isinstance(loc[-1], str):
        return ""
    parent = _field_schema(model, loc[:-1])
    known = (parent or {}).get("properties", {})
    guess = nearest_key(loc[-1], known)
    return f" (did you mean {guess}?)" if guess else ""


def _describe(schema: dict[str, Any]) -> str | None:
    """``{"type": "integer", "minimum": 1}`` → ``"an integer >= 1"``."""
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        if len(options) == 1:
            described = _describe(options[0])
            return f"{described} or null" if described else None
        return None
    if "enum" in schema:
        return "one of " + ", ".join(_json(v) for v in schema["enum"])
    if "const" in schema:
        return _json(schema["const"])
    t = schema.get("type")
    text: str | None
    if schema.get("duration"):
        text = "a duration like 30s, 10m or 1h"
    else:
        text = {"integer": "an integer", "number": "a number", "boolean": "true or false",
                "string": "a string", "array": "a list", "object": "a mapping"}.get(t or "")
    if text is None:
        return None
    bounds = []
    for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                    ("exclusiveMaximum", "<"), ("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if key in schema:
            bound = schema[key]
            bounds.append(f"{op} {bound:g}" if isinstance(bound, float) else f"{op} {bound}")
    if schema.get("duration") and bounds:  # "a duration like 30s, 10m or 1h, > 0"
        return f"{text}, {' '.join(bounds)}"
    return " ".join([text, *bounds])


def _format_errors(model: type[BaseModel], err: ValidationError, prefix: tuple[Any, ...] = ()) -> list[str]:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path = ".".join(str(p) for p in prefix + loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"{path}: unknown key{did_you_mean(model, loc)}")
            continue
        got = f"got {MASK} (not shown: a secret)" if _is_secret_path(model, loc) else f"got {_json(e.get('input'))}"
        if e["type"] in ("value_error", "assertion_error"):
            reason = str(e.get("ctx", {}).get("error", e["msg"]))
            lines.append(f"{path}: {reason}, {got}")
            continue
        schema = _field_schema(model, loc)
        described = _describe(schema) if schema else None
        reason = f"must be {described}" if described else e["msg"].lower()
        lines.append(f"{path}: {reason}, {got}")
    return lines


def _is_secret_path(model: type[BaseModel], loc: tuple[Any, ...]) -> bool:
    """Whether ``loc`` (a validation error's location) lies in a field marked :class:`Secret`."""
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return False
        if not isinstance(part, str) or part not in current.model_fields:
            return False
        if secret_marker(current, part) is not None:
            return True
        current = _model_of(current.model_fields[part].annotation)
    return False


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The configuration section a field's type holds (``X``, ``X | None``), else None."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _validate_detectors(raw: Any) -> tuple[dict[str, DetectorConfig], str, list[str]]:
    """Each registered detector's config: the profile's defaults, overridden by the file's section."""
    classes = sections()
    errors: list[str] = []
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return {}, DEFAULT_PROFILE, [f"detectors: must be a mapping, got {_json(raw)}"]
    profile = raw.get("profile", DEFAULT_PROFILE)
    if profile not in PROFILES:
        errors.append(f"detectors.profile: must be one of {', '.join(PROFILES)}, got {_json(profile)}")
        profile = DEFAULT_PROFILE
    for name in raw:
        if name != "profile" and name not in classes:
            errors.append(f"detectors.{name}: unknown detector (known: {', '.join(classes)})")
    out: dict[str, DetectorConfig] = {}
    for name, (model, profiles) in classes.items():
        section = raw.get(name) or {}
        if not isinstance(section, Mapping):
            errors.append(f"detectors.{name}: must be a mapping, got {_json(section)}")
            continue
        try:
            out[name] = model.model_validate(_merged(profiles.get(profile, {}), section))
        except ValidationError as e:
            errors.extend(_format_errors(model, e, ("detectors", name)))
    return out, profile, errors


def _merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``, mappings merged key by key (a profile's weights stay unless named)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def build_config(raw: Mapping[str, Any] | None, env: Mapping[str, str] | None = None) -> Config:
    """Validate a configuration mapping (as read from YAML) and fold in the OTLP exporter env vars.

    Raises:
        ConfigError: with every problem found, each naming its key path.
    """
    raw = dict(raw or {})
    if env is not None:
        raw = apply_otlp_env(raw, env)
    detectors_raw = raw.pop("detectors", None)
    errors: list[str] = []
    cfg: Config | None = None
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as e:
        errors.extend(_format_errors(Config, e))
    detectors, profile, det_errors = _validate_detectors(detectors_raw)
    errors.extend(det_errors)
    if cfg is not None:
        errors.extend(_cross_checks(cfg))
        errors.extend(_non_finite(cfg.model_dump()))
    # A detector threshold of .inf is documented to switch that check off; NaN means nothing anywhere.
    errors.extend(_non_finite({k: v.model_dump() for k, v in detectors.items()}, "detectors", allow_inf=True))
    if errors or cfg is None:
        raise ConfigError(errors)
    built = cfg.model_copy(update={"detectors": detectors})
    built._profile = profile
    return built


def _non_finite(data: Any, path: str = "", allow_inf: bool = False) -> list[str]:
    """Key paths of numbers that are infinite or not a number (``1e400``, ``.inf``, ``.nan``): a limit of
    infinity silently disables what it limits, and NaN compares false with everything."""
    if isinstance(data, float) and (math.isnan(data) or (math.isinf(data) and not allow_inf)):
        return [f"{path}: must be a finite number, got {data}"]
    if isinstance(data, Mapping):
        return [e for k, v in data.items()
                for e in _non_finite(v, f"{path}.{k}" if path else str(k), allow_inf)]
    if isinstance(data, (list, tuple)):
        return [e for i, v in enumerate(data) for e in _non_finite(v, f"{path}[{i}]", allow_inf)]
    return []


def _cross_checks(cfg: Config) -> list[str]:
    errors = []
    ex = cfg.exporter
    if ex.endpoint is not None:
        try:
            parse_upstream(ex.endpoint, ex.protocol)
        except ValueError as e:
            errors.append(f"exporter.endpoint: {e}, got {_json(ex.endpoint)}")
    if cfg.receiver.acknowledge == "received" and ex.persistent_dir:
        errors.append("receiver.acknowledge: received cannot be combined with exporter.persistent_dir (a "
                      "request acknowledged before it is on disk would not survive a crash); use processed")
    if ex.retry_max_interval < ex.retry_initial_interval:
        errors.append("exporter.retry_max_interval: must be >= exporter.retry_initial_interval")
    tls = cfg.receiver.tls
    if bool(tls.cert_file) != bool(tls.key_file):
        errors.append("receiver.tls: cert_file and key_file must be set together")
    if bool(ex.tls.cert_file) != bool(ex.tls.key_file):
        errors.append("exporter.tls: cert_file and key_file must be set together")
    if tls.client_ca_file and not tls.enabled:
        errors.append("receiver.tls.client_ca_file: needs cert_file and key_file")
    if cfg.admin.allow_remote_without_token and cfg.admin.read_localhost_only:
        errors.append("admin.allow_remote_without_token: cannot be true together with admin.read_localhost_only")
    return errors


def secret_marker(model: type[BaseModel], name: str) -> Secret | None:
    """The :class:`Secret` mark of field ``name`` of ``model``, or None."""
    info = model.model_fields.get(name)
    if info is None:
        return None
    return next((m for m in info.metadata if isinstance(m, Secret)), None)


def mask_secrets(model: BaseModel, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (``model`` dumped as JSON data) with the values of its secret fields masked, at any depth."""
    for name in type(model).model_fields:
        if name not in data:
            continue
        marker = secret_marker(type(model), name)
        value = getattr(model, name)
        if marker is not None:
            data[name] = _masked(data[name], marker)
        elif isinstance(value, BaseModel) and isinstance(data[name], dict):
            mask_secrets(value, data[name])
        elif isinstance(value, list) and isinstance(data[name], list):
            for item, dumped in zip(value, data[name], strict=False):
                if isinstance(item, BaseModel) and isinstance(dumped, dict):
                    mask_secrets(item, dumped)
        elif isinstance(value, dict) and isinstance(data[name], dict):
            for key, item in value.items():
                if isinstance(item, BaseModel) and isinstance(data[name].get(key), dict):
                    mask_secrets(item, data[name][key])
    return data


def _masked(value: Any, marker: Secret) -> Any:
    if value is None or value == "" or value == [] or value == {}:
        return value
    if isinstance(value, list):
        return [MASK for _ in value]
    if isinstance(value, dict):
        return {k: MASK for k in value}
    if isinstance(marker, SecretInUrl) and isinstance(value, str):
        return _masked_url(value)
    return MASK


#: What a masked secret looks like.
MASK = "***"


def _masked_url(url: str) -> str:
    """``url`` with the password of its user info and the values of its query masked."""
    parts = urlsplit(url if "://" in url else "//" + url)
    netloc = parts.netloc
    _, at, host = netloc.rpartition("@")
    if at:  # a token may stand in the user name alone
        netloc = f"{MASK}@{host}"
    query = "&".join(f"{k}={MASK}" if sep else k for k, sep, _ in (p.partition("=") for p in parts.query.split("&")
                                                                     if p)) if parts.query else ""
    masked = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    return masked if "://" in url else masked.removeprefix("//")


def check_files(cfg: Config) -> list[str]:
    """Problems with the files and directories the configuration names, each with its key path.

    ``serve`` and ``check-config`` run this after validation, so a missing certificate or an unusable
    queue directory is a configuration error (exit code 2) before any port opens, not a failure halfway
    through start-up.
    """
    errors: list[str] = []
    rtls, etls = cfg.receiver.tls, cfg.exporter.tls
    for key, path in (("receiver.tls.cert_file", rtls.cert_file), ("receiver.tls.key_file", rtls.key_file),
                      ("receiver.tls.client_ca_file", rtls.client_ca_file),
                      ("exporter.tls.ca_file", etls.ca_file), ("exporter.tls.cert_file", etls.cert_file),
                      ("exporter.tls.key_file", etls.key_file),
                      ("receiver.auth.bearer_tokens_file", cfg.receiver.auth.bearer_tokens_file),
                      ("admin.token_file", cfg.admin.token_file),
                      ("admin.agent_token_file", cfg.admin.agent_token_file)):
        if path:
            problem = _unreadable(path)
            if problem:
                errors.append(f"{key}: {problem}, got {_json(path)}")
    if not errors:
        errors.extend(_tls_problems(cfg))
    if cfg.exporter.persistent_dir:
        problem = _unusable_dir(cfg.exporter.persistent_dir)
        if problem:
            errors.append(f"exporter.persistent_dir: {problem}, got {_json(cfg.exporter.persistent_dir)}")
    return errors


def _unreadable(path: str) -> str | None:
    p = Path(path)
    if not p.exists():
        return "no such file"
    if not p.is_file():
        return "not a file"
    if not os.access(p, os.R_OK):
        return "not readable"
    return None


def _unusable_dir(path: str) -> str | None:
    """Why a directory cannot hold the queue: it must exist and be writable, or be creatable."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            return "not a directory"
        if not os.access(p, os.W_OK | os.X_OK):
            return "not writable"
        return None
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"does not exist and cannot be created ({parent} is not a writable directory)"
    return None


def _tls_problems(cfg: Config) -> list[str]:
    """Certificates and keys that exist but cannot be loaded (not PEM, key not matching the certificate)."""
    import ssl

    errors = []
    rtls, etls = cfg.receiver.tls, cfg.exporter.tls
    if rtls.enabled:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(rtls.cert_file, rtls.key_file)  # type: ignore[arg-type]
        except (ssl.SSLError, OSError) as e:
            errors.append("receiver.tls.cert_file: cannot load it with receiver.tls.key_file "
                          f"({_ssl_reason(e)})")
    if rtls.client_ca_file:
        try:
            ssl.create_default_context().load_verify_locations(rtls.client_ca_file)
        except (ssl.SSLError, OSError) as e:
            errors.append(f"receiver.tls.client_ca_file: cannot load it ({_ssl_reason(e)})")
    if etls.ca_file:
        try:
            ssl.create_default_context().load_verify_locations(etls.ca_file)
        except (ssl.SSLError, OSError) as e:
            errors.append(f"exporter.tls.ca_file: cannot load it ({_ssl_reason(e)})")
    if etls.cert_file and etls.key_file:
        try:
            ssl.create_default_context().load_cert_chain(etls.cert_file, etls.key_file)
        except (ssl.SSLError, OSError) as e:
            errors.append("exporter.tls.cert_file: cannot load it with exporter.tls.key_file "
                          f"({_ssl_reason(e)})")
    return errors


def _ssl_reason(error: Exception) -> str:
    return getattr(error, "reason", None) or getattr(error, "strerror", None) or str(error)


#: Deepest nesting of mappings and lists a configuration file may have (the real keys need four levels).
MAX_YAML_DEPTH = 32


class _YAMLProblem(Exception):
    """A structural problem of the file, found while reading it; the message names the key path."""


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    """The safe loader, refusing what it would otherwise accept silently or crash on.

    Two keys equal in one mapping are an error naming both lines (the plain loader keeps the last one, so
    a setting could be overridden without anyone noticing), and nesting deeper than
    :data:`MAX_YAML_DEPTH` is an error naming where it starts (the plain loader recurses until Python's
    recursion limit and fails with a traceback).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._path: list[str] = []

    def compose_node(self, parent: Any, index: Any) -> Any:
        labelled = parent is not None and index is not None
        if labelled:
            self._path.append(f"[{index}]" if isinstance(index, int) else _key_label(index))
        try:
            if len(self._path) > MAX_YAML_DEPTH:
                raise _YAMLProblem(f"{_dotted(self._path[:4])}: nested deeper than {MAX_YAML_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            if labelled:
                self._path.pop()

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        seen: dict[Any, int] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            label = (key.tag, key.value)
            line = key.start_mark.line + 1
            if label in seen:
                where = _dotted([*self._path, str(key.value)])
                raise _YAMLProblem(f"{where}: duplicate key (lines {seen[label]} and {line})")
            seen[label] = line
        return node


def _key_label(node: Any) -> str:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else "?"


def _dotted(parts: list[str]) -> str:
    joined = "".join(p if p.startswith("[") or i == 0 else f".{p}" for i, p in enumerate(parts))
    return joined or "(top level)"


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML configuration file; an empty file is an empty configuration."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError([f"{path}: cannot read ({e.strerror})"]) from None
    except UnicodeDecodeError as e:
        raise ConfigError([f"{path}: not valid UTF-8 text ({e.reason} at byte {e.start})"]) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # safe: a SafeLoader subclass
    except _YAMLProblem as e:
        raise ConfigError([str(e)]) from None
    except yaml.YAMLError as e:
        raise ConfigError([f"{path}: not valid YAML ({e})"]) from None
    except RecursionError:
        raise ConfigError([f"{path}: nested too deeply"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping"])
    return data


def load_config(path: str | Path | None, overrides: Mapping[str, Any] | None = None,
                env: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (if any), apply ``overrides`` (dotted keys from flags) and env, and validate."""
    raw = load_yaml(path) if path else {}
    raw = apply_listen_host(raw, os.environ if env is None else env)
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, leaf = dotted.split(".")
        for p in parents:
            child = node.get(p)
            if not isinstance(child, dict):
                child = {}
                node[p] = child
            node = child
        node[leaf] = value
    return build_config(raw, os.environ if env is None else env)


#: Environment variable that replaces ``localhost`` in the listeners' default endpoints.
LISTEN_HOST_ENV = "OTELLOOP_LISTEN_HOST"
#: The listeners' configuration paths and default ports.
_LISTENERS = ((("receiver", "grpc"), 4317), (("receiver", "http"), 4318), (("admin",), 9464))


def apply_listen_host(raw: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Listen on ``$OTELLOOP_LISTEN_HOST`` instead of ``localhost`` where the file names no endpoint.

    The listeners are loopback-only by default (like the OpenTelemetry Collector's receivers); a
    container image must listen on every interface whatever command it is given, so it sets this
    variable once instead of every ``serve`` invocation repeating three flags. Files and flags still win.
    """
    host = env.get(LISTEN_HOST_ENV, "").strip()
    if not host:
        return raw
    for keys, port in _LISTENERS:
        node: Any = raw
        for key in keys:
            if not isinstance(node, dict):
                break
            node = node.setdefault(key, {}) if node.get(key) is None else node[key]
        if isinstance(node, dict) and "endpoint" not in node:
            node["endpoint"] = f"{host}:{port}"
    return raw


# ---------------------------------------------------------------------------------------------------
# Upstream endpoints and the OTEL_EXPORTER_OTLP_* variables


def parse_upstream(url: str, protocol: str = "grpc") -> tuple[str, str, bool]:
    """Endpoint → (protocol, target, tls).

    ``grpc://h:p`` and ``h:p`` → gRPC plaintext, ``grpcs://h:p`` → gRPC with TLS, ``http(s)://h:p[/path]``
    → OTLP/HTTP protobuf with ``/v1/traces`` unless a path is given. For gRPC the target is ``h:p``; for
    HTTP it is the full URL.
    """
    url = url.strip()
    if "://" not in url:
        if protocol == "http/protobuf":
            url = "http://" + url
        else:
            split_host_port(url)
            return "grpc", url, False
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme in ("grpc", "grpcs"):
        hostport = rest.rstrip("/")
        split_host_port(hostport)
        return "grpc", hostport, scheme == "grpcs"
    if scheme in ("http", "https"):
        host, slash, path = rest.partition("/")
        if not host:
            raise ValueError("has no host")
        path = "/" + path if slash and path else "/v1/traces"
        return "http/protobuf", f"{scheme}://{host}{path}", scheme == "https"
    raise ValueError(f"unsupported scheme {scheme!r} (use grpc, grpcs, http or https)")


def _parse_headers(text: str) -> dict[str, str]:
    from urllib.parse import unquote

    out = {}
    for part in text.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[unquote(k.strip()).lower()] = unquote(v.strip())
    return out


def apply_otlp_env(raw: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Fold the standard OTLP exporter variables into ``raw['exporter']`` where the file is silent.

    The signal-specific ``OTEL_EXPORTER_OTLP_TRACES_*`` wins over ``OTEL_EXPORTER_OTLP_*``. A generic
    HTTP endpoint gets ``/v1/traces`` appended; a signal-specific one is used as-is (OTel spec).
    """

    def get(name: str) -> tuple[str | None, bool]:
        v = env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
        if v:
            return v, True
        v = env.get(f"OTEL_EXPORTER_OTLP_{name}")
        return (v, False) if v else (None, False)

    current = raw.get("exporter")
    if current is not None and not isinstance(current, Mapping):
        return raw  # reported by validation
    exporter = dict(current or {})
    protocol, _ = get("PROTOCOL")
    if protocol and "protocol" not in exporter:
        exporter["protocol"] = "grpc" if protocol == "grpc" else "http/protobuf"
    endpoint, specific = get("ENDPOINT")
    if endpoint and exporter.get("endpoint") is None:
        proto = exporter.get("protocol", "grpc")
        if proto == "http/protobuf" and endpoint.startswith(("http://", "https://")) and not specific:
            endpoint = endpoint.rstrip("/") + "/v1/traces"
        elif proto == "grpc" and endpoint.startswith("http://"):
            endpoint = "grpc://" + endpoint[len("http://"):].rstrip("/")
        elif proto == "grpc" and endpoint.startswith("https://"):
            endpoint = "grpcs://" + endpoint[len("https://"):].rstrip("/")
        exporter["endpoint"] = endpoint
    headers, _ = get("HEADERS")
    if headers and not exporter.get("headers"):
        exporter["headers"] = _parse_headers(headers)
    compression, _ = get("COMPRESSION")
    if compression and "compression" not in exporter:
        exporter["compression"] = compression
    timeout, _ = get("TIMEOUT")
    if timeout and "timeout" not in exporter:
        try:
            exporter["timeout"] = float(timeout) / 1000.0  # milliseconds per the OTel spec
        except ValueError:
            exporter["timeout"] = timeout
    certificate, _ = get("CERTIFICATE")
    if certificate:
        tls = dict(exporter.get("tls") or {})
        tls.setdefault("ca_file", certificate)
        exporter["tls"] = tls
    if exporter or current is not None:
        raw = dict(raw, exporter=exporter)
    return raw


def effective_config(cfg: Config) -> dict[str, Any]:
    """The configuration in force as plain data (every field marked :class:`Secret` masked), for
    ``check-config``."""
    data = mask_secrets(cfg, cfg.model_dump(mode="json"))
    data["detectors"] = {"profile": cfg.detector_profile,
                         **{k: v.model_dump(mode="json") for k, v in cfg.detectors.items()}}
    data["state"]["hold_stopped_sessions"] = cfg.holds_stopped_sessions  # resolved, as for the profile's values
    for k, v in list(data.items()):
        if isinstance(v, float) and math.isinf(v):
            data[k] = ".inf"
    return data
