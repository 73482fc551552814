"""Process lifecycle of ``otelloop serve``: start listeners, reload on SIGHUP, drain on SIGTERM.

Order at start: validate configuration (before any port opens) → exporter → receivers → admin → ready
file. Order at stop: not ready → stop receivers (in-flight requests finish) → drain the export queue
within the grace period → exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from otelloop import bounds
from otelloop.admin import AdminAPI
from otelloop.alertlog import AlertLog
from otelloop.config import Config, ConfigError, load_config, split_host_port
from otelloop.events import EventHub
from otelloop.logs import EscapingFormatter, escape
from otelloop.model import Finding, Step
from otelloop.pipeline import Pipeline
from otelloop.receiver.grpc_server import GrpcReceiver
from otelloop.receiver.http_server import HttpReceiver
from otelloop.receiver.ingest import BearerAuth, Ingest
from otelloop.redact import redact
from otelloop.resources import Accounting, MemoryGuard, limit_arenas, rss_bytes
from otelloop.startup import probe_upstream, startup_lines
from otelloop.state import NAME_CHARS
from otelloop.telemetry import Metrics

log = logging.getLogger("otelloop")

#: Seconds between two sweeps of idle sessions.
SWEEP_INTERVAL = 1.0

#: Seconds between two looks at whether a collection is due (:class:`Collector`).
GC_CHECK_INTERVAL = 0.01

#: Young objects (CPython's net allocation count) that make a collection between requests due.
GC_YOUNG_OBJECTS = 2_000

#: The interpreter's own threshold, for when requests keep coming with no pause between them (under
#: saturation): then it collects by its own rules (a 512-span request of the benchmarks keeps about
#: 10,000 new objects alive, so one request alone does not reach it).
GC_INLINE_THRESHOLD = 20_000

#: Objects frozen since the last full collection that make the next one due (at least: see
#: :class:`Collector` for the rest of the rule); a session of the benchmarks holds about 70 of them.
GC_FULL_MIN_OBJECTS = 1_000_000

#: Largest multiple of the live heap frozen between two full collections.
GC_FULL_MAX_FACTOR = 64

def print_finding(step: Step, finding: Finding) -> None:
    """Detect-only mode: one human-readable line per finding on stderr. Every value comes from spans (or
    quotes them), so each is escaped: a session id cannot start a line of its own."""
    detail = escape(redact(finding.message) or finding.event)
    sys.stderr.write(f"otelloop: [{escape(finding.severity)}] {escape(finding.finding)} "
                     f"session={escape(step.session, NAME_CHARS)} "
                     f"agent={escape(redact(step.agent, NAME_CHARS)) or '-'} span={escape(step.span_id)}: "
                     f"{detail}\n")
    sys.stderr.flush()


def _read_secret_file(path: str | None) -> list[str]:
    if not path:
        return []
    return [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]


def _read_secret_env(name: str | None) -> list[str]:
    if not name:
        return []
    return [t.strip() for t in os.environ.get(name, "").split(",") if t.strip()]


def receiver_tokens(cfg: Config) -> list[str]:
    """Accepted OTLP bearer tokens: inline, from a file and from an environment variable."""
    auth = cfg.receiver.auth
    return list(auth.bearer_tokens) + _read_secret_file(auth.bearer_tokens_file) + _read_secret_env(
        auth.bearer_tokens_env)


def admin_token(cfg: Config) -> str | None:
    """The admin token: the environment variable, else the file, else the inline value."""
    admin = cfg.admin
    found = _read_secret_env(admin.token_env) or _read_secret_file(admin.token_file)
    return found[0] if found else admin.token


def agent_token(cfg: Config) -> str | None:
    """The agents' verdict token: the environment variable, else the file, else the inline value."""
    admin = cfg.admin
    found = _read_secret_env(admin.agent_token_env) or _read_secret_file(admin.agent_token_file)
    return found[0] if found else admin.agent_token


class Service:
    """One running otelloop.

    Args:
        config: validated configuration.
        config_path: the file to re-read on SIGHUP (None: reload re-validates the flags only).
        overrides: flag values that keep overriding the file on reload.
        ready_file: where to write the bound addresses once ready.
    """

    def __init__(self, config: Config, config_path: str | None = None, overrides: dict[str, Any] | None = None,
                 ready_file: str | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.overrides = overrides or {}
        self.ready_file = ready_file
        self.metrics = Metrics(limits=config.metrics)
        self.pipeline = Pipeline(config, self.metrics)
        sheds = self.metrics.memory_sheds
        self.memory = MemoryGuard(config.limits.memory_mib, on_shed=lambda _sessions, _freed: sheds.inc())
        self.exporter: Any = None
        self.addresses: dict[str, str] = {}
        self._ready = False
        self._stopping = asyncio.Event()
        self._runners: list[web.AppRunner] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.grpc: GrpcReceiver | None = None
        self.events: EventHub | None = None
        #: collects garbage between requests (``serve`` sets it; None leaves the interpreter's own rules)
        self.collector: Collector | None = None

    # -- start -------------------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        probe = None
        if cfg.exporter.endpoint:
            probe = asyncio.create_task(probe_upstream(cfg.exporter.endpoint, cfg.exporter.protocol))
            self._tasks.append(probe)  # type: ignore[arg-type]
        if cfg.exporter.endpoint:
            from otelloop.export import build_exporter

            self.exporter = build_exporter(cfg.exporter, self.metrics)
            await self.exporter.start()
            exporter = self.exporter
            self.memory.in_flight.queued = lambda: exporter.memory_bytes  # held for requests in flight
            self.pipeline.finding_sinks.append(AlertLog(log))
        else:
            self.pipeline.finding_sinks.append(print_finding)
        self.metrics.observe_state(lambda: len(self.pipeline.store), self.pipeline.verdict_counts)
        self.ingest = Ingest(self.pipeline, self.exporter, self.metrics, self.memory.overloaded,
                             self.memory.in_flight, acknowledge=cfg.acknowledge,
                             backlog_spans=cfg.receiver.backlog_spans)
        auth = BearerAuth(receiver_tokens(cfg))
        tls = cfg.receiver.tls
        self.grpc = GrpcReceiver(self.ingest, cfg.receiver.grpc.endpoint,
                                 int(cfg.receiver.grpc.max_request_mib * (1 << 20)), auth, tls)
        await self.grpc.start()
        self.addresses["grpc"] = _address(cfg.receiver.grpc.endpoint, self.grpc.port)
        http = HttpReceiver(self.ingest, int(cfg.receiver.http.max_request_mib * (1 << 20)), auth,
                            cfg.receiver.http.read_body_timeout)
        self.addresses["http"] = await self._serve(http.app, cfg.receiver.http.endpoint, client_certs=True,
                                                   name="OTLP/HTTP")
        self.events = EventHub(self.pipeline, self.metrics, cfg.admin.max_event_clients,
                               cfg.admin.event_buffer_kib * 1024, cfg.admin.event_rate_kib * 1024)
        admin = AdminAPI(self.pipeline, self.readiness, admin_token(cfg), cfg.admin.read_localhost_only,
                         agent_token=agent_token(cfg),
                         allow_remote_without_token=cfg.admin.allow_remote_without_token, events=self.events,
                         max_concurrent_lists=cfg.admin.max_concurrent_lists, settled=self.ingest.settled)
        self.addresses["admin"] = await self._serve(admin.app, cfg.admin.endpoint,
                                                    client_certs=cfg.admin.require_client_cert,
                                                    cancel_on_disconnect=True, name="the admin API")
        self.memory.accounting = self._accounting()
        self._tasks.append(asyncio.create_task(self._housekeeping()))
        if self.collector is not None:
            self._tasks.append(asyncio.create_task(self._collect_garbage(self.collector)))
            if self.ingest.backlog is not None:
                self.ingest.backlog.between_jobs = self._between_jobs
        self._ready = True
        answer = await probe if probe is not None else None
        for warning, line in startup_lines(cfg, self.config_path, self.addresses, answer):
            log.log(logging.WARNING if warning else logging.INFO, "%s", line)
        if self.ready_file:
            tmp = Path(self.ready_file + ".tmp")
            tmp.write_text(json.dumps(self.addresses))
            tmp.replace(self.ready_file)

    async def _serve(self, app: web.Application, endpoint: str, client_certs: bool,
                     cancel_on_disconnect: bool = False, name: str = "HTTP") -> str:
        """Serve ``app``; ``cancel_on_disconnect`` ends a handler when its client goes away (event streams
        then free their slot at once instead of at their next write)."""
        host, port = split_host_port(endpoint)
        # keepalive_timeout closes a connection whose request headers are incomplete that long after it
        # opened (or after its last response): the header read timeout, and the idle keep-alive timeout.
        runner = web.AppRunner(app, auto_decompress=False, access_log=None, handle_signals=False,
                               handler_cancellation=cancel_on_disconnect,
                               keepalive_timeout=self.config.receiver.http.read_header_timeout)
        await runner.setup()
        ssl_ctx = _server_ssl(self.config, client_certs)
        site = web.TCPSite(runner, host, port, ssl_context=ssl_ctx, reuse_address=True)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise OSError(e.errno, f"cannot listen for {name} on {endpoint}: "
                                   f"{os.strerror(e.errno) if e.errno else e}") from None
        self._runners.append(runner)
        bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
        return _address(endpoint, bound[1])

    def _accounting(self) -> Accounting:
        """What the memory guard counts as state: the process as it is now (started, no session yet),
        plus sessions × their estimated size, plus the caches' bytes (requests in flight apart)."""
        store = self.pipeline.store  # kept across reloads (they resize it)
        baseline = rss_bytes() - len(store) * store.session_bytes() - bounds.caches_nbytes()
        accounting = Accounting(store.__len__, store.session_bytes, bounds.caches_nbytes, bounds.clear_caches,
                                store.shed, baseline)
        in_flight = self.memory.in_flight
        self.metrics.observe_memory(accounting.accounted, lambda: in_flight.nbytes)
        return accounting

    def readiness(self) -> tuple[bool, str]:
        if not self._ready:
            return False, "starting" if not self._stopping.is_set() else "shutting down"
        shed = self.memory.overloaded()
        if shed:
            return False, shed
        return True, ""

    async def _housekeeping(self) -> None:
        while not self._stopping.is_set():
            self.pipeline.store.sweep()
            self.memory.check()
            if self.exporter is not None:
                self.metrics.export_queue_spans.set(self.exporter.queued_spans)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), SWEEP_INTERVAL)

    def _between_jobs(self) -> None:
        """Collect between two requests of the backlog when it is due and no receiver's handler waits in
        the middle of a request: under a steady stream of requests no quiet moment comes, and the objects
        left unfrozen would otherwise pile up into one long collection at the next one. What the answers
        being sent hold is frozen then; their only cycles are the small ones of refused gRPC calls (see
        ``docs/architecture.md``), which full collections find."""
        collector = self.collector
        if collector is not None and not self.ingest.serving_requests and collector.due():
            collector.collect()

    async def _collect_garbage(self, collector: Collector) -> None:
        """Collect when enough new objects accumulated and no request was in flight for a whole interval
        (a request's handler has returned before its answer is sent: its call's objects are in use a
        little longer)."""
        ingest = self.ingest
        quiet_since = -1  # requests served when the last look found none in flight
        while not self._stopping.is_set():
            served = ingest.served_requests
            if ingest.idle and served == quiet_since and collector.due():
                collector.collect()
            quiet_since = served if ingest.idle else -1
            await asyncio.sleep(GC_CHECK_INTERVAL)

    # -- reload ------------------------------------------------------------------------------------

    def reload(self) -> bool:
        """Re-read and validate the configuration; apply it whole from the next step, or keep the old one."""
        try:
            new = load_config(self.config_path, self.overrides)
        except ConfigError as e:
            self.metrics.config_reloads.labels("rejected").inc()
            log.error("configuration reload rejected, the settings in force stay: %s", "; ".join(e.errors))
            return False
        self.pipeline.reconfigure(new)
        self.memory.limit_mib = new.limits.memory_mib
        self.metrics.configure(new.metrics)
        self.config = new
        self.metrics.config_reloads.labels("applied").inc()
        log.info("configuration reloaded (listener and exporter changes need a restart)")
        return True

    # -- stop --------------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests, drain the queue within the grace period."""
        self._ready = False
        self._stopping.set()
        if hasattr(self, "ingest"):
            self.ingest.draining = True
        grace = self.config.exporter.shutdown_grace
        deadline = time.monotonic() + grace  # one grace for the requests in processing and the queue
        if self.grpc is not None:
            await self.grpc.stop(min(grace, 5.0))
        if self.events is not None:
            self.events.close()  # event streams end now instead of holding the admin listener open
        for runner in self._runners:
            await runner.cleanup()
        if hasattr(self, "ingest"):
            await self.ingest.wait_idle(deadline - time.monotonic())  # requests being processed are queued
        for task in self._tasks:
            task.cancel()
        if self.exporter is not None:
            left = await self.exporter.shutdown(max(deadline - time.monotonic(), 0.0))
            if left:
                log.error("shutdown: %d spans could not be delivered within %.0fs and were dropped", left, grace)
        log.info("otelloop stopped")

    async def run(self) -> None:
        """Start, then serve until SIGTERM/SIGINT; SIGHUP reloads."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        await self.start()
        await stop.wait()
        log.info("shutting down")
        await self.stop()


def _address(endpoint: str, port: int) -> str:
    """``host:port`` as a client would write it: an IPv6 host in brackets (``[::1]:4317``)."""
    host, _ = split_host_port(endpoint)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _server_ssl(config: Config, client_certs: bool):  # type: ignore[no-untyped-def]
    """The listeners' TLS context (``receiver.tls``); client certificates demanded only where asked."""
    tls = config.receiver.tls
    if not tls.enabled:
        return None
    import ssl

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls.cert_file, tls.key_file)  # type: ignore[arg-type]
    if tls.client_ca_file and client_certs:
        ctx.load_verify_locations(tls.client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class Collector:
    """Runs the cyclic garbage collector between requests, over what is new, and freezes what survives.

    otelloop allocates a few dozen short-lived objects per span, nearly all freed by reference counting,
    and keeps a little state per session for a long time. Left to itself, CPython's collector runs in
    the middle of requests: every collection of the young generation visits everything a request holds
    at that moment (tens of milliseconds for a 512-span request), and the older generations, which it
    collects every 20 and every 400 of those (and then whenever they grew by a quarter), hold the whole
    session store (hundreds of milliseconds, growing with the sessions). So the service collects at a
    moment when no request is in flight and at least :data:`GC_YOUNG_OBJECTS` new objects accumulated
    (:meth:`collect`): it collects every object not frozen, which then is what the last request or two
    left behind, and freezes what survived (``gc.freeze``), so later collections never visit it again
    while reference counting still frees it. Nothing a request in flight uses is frozen: a request's
    objects that become cyclic garbage when it ends (a refused gRPC call's error and call state) are
    then found by the next collection. When requests come without a pause (under saturation), no such
    moment comes: requests answered on receipt are collected between two jobs of the backlog instead
    (``Service._between_jobs``: what answers being sent hold is frozen then, and their few cycles wait
    for a full collection), and otherwise the interpreter collects by its own rules, over the objects
    not frozen only (:data:`GC_INLINE_THRESHOLD`).

    Cyclic garbage whose objects were frozen while still in use is found only by a full collection
    (:meth:`full`: unfreeze, collect everything, freeze again), a pause that grows with the heap (about
    0.3 s for 300,000 objects). There is little such garbage: otelloop's state is freed by reference
    counting, and measured under load a full collection finds a dozen objects among hundreds of
    thousands. A full collection therefore runs when ``factor`` times as many objects were frozen since
    the last one as that one left alive (and at least :data:`GC_FULL_MIN_OBJECTS`; CPython's own rule
    waits for a quarter), where ``factor`` starts at 1 and doubles, up to :data:`GC_FULL_MAX_FACTOR`,
    each time a full collection found less than 1 % of the heap to be garbage, and falls back to 1 when
    it found more: a process that makes no such garbage pays for a full collection ever more rarely, and
    one that makes some is collected in full as often as in the first place.
    """

    def __init__(self, young: int = GC_YOUNG_OBJECTS, full_min: int = GC_FULL_MIN_OBJECTS) -> None:
        self.young = young
        self.full_min = full_min
        self.full_collections = 0
        #: full collections wait for ``factor`` times the live heap to be frozen (see the class)
        self.factor = 1
        #: objects frozen since the last full collection (counted when frozen; some are freed since)
        self._frozen = 0
        #: objects the last full collection (or start-up) left frozen
        self._alive = gc.get_freeze_count()

    def due(self) -> bool:
        """Whether new objects wait for a collection (never while a large request paused collection)."""
        return gc.isenabled() and gc.get_count()[0] >= self.young

    def collect(self) -> None:
        """Collect every object not frozen and freeze what survived, or collect in full when that is due.
        Call it when no request is in flight."""
        # The oldest generation holds only what the interpreter's own collections promoted since the last
        # freeze; clearing the free lists, as a collection of it does, is not worth it otherwise.
        gc.collect(2 if gc.get_objects(2) else 1)
        # Counted in the oldest generation, which holds only them now; not from gc.get_freeze_count(),
        # which walks every frozen object (the whole heap, twice per collection: a quarter of ingest
        # capacity with many small requests).
        survivors = len(gc.get_objects(2))
        gc.freeze()
        self._frozen += survivors
        if self._frozen >= max(self.full_min, self.factor * self._alive):
            self.full()

    def full(self) -> int:
        """Collect every object, frozen or not, and freeze what is left; returns the garbage found (and logs
        it: the pause is long enough for an operator to want to know)."""
        started = time.monotonic()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self._alive = gc.get_freeze_count()
        self._frozen = 0
        self.full_collections += 1
        self.factor = min(2 * self.factor, GC_FULL_MAX_FACTOR) if 100 * found < self._alive + found else 1
        log.info("full garbage collection: %d objects of garbage among %d kept, in %.0f ms; the next comes "
                 "after %d times as many objects are kept", found, self._alive,
                 1000 * (time.monotonic() - started), self.factor)
        return found


def _tune_gc() -> None:
    """Freeze what exists at start-up out of the collector's view and leave collection to
    :class:`Collector`; the interpreter collects by itself only after :data:`GC_INLINE_THRESHOLD` new
    objects, which requests with pauses between them do not reach."""
    gc.freeze()
    gc.set_threshold(GC_INLINE_THRESHOLD, 20, 20)


def serve(config: Config, config_path: str | None, overrides: dict[str, Any], ready_file: str | None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=os.environ.get("OTELLOOP_LOG_LEVEL", "INFO").upper(), handlers=[handler])
    limit_arenas()
    service = Service(config, config_path, overrides, ready_file)
    _tune_gc()
    service.collector = Collector()
    try:
        asyncio.run(service.run())
    except OSError as e:  # a port in use, an unreadable certificate, a queue directory held by another process
        sys.exit(startup_failed(e))


def startup_failed(error: OSError) -> int:
    """Say why the service could not start in one line on stderr (no traceback: the reason is the
    environment, not a bug) and return the exit code, 2 like a configuration error."""
    reason = error.strerror if error.errno is not None and error.strerror else str(error)
    sys.stderr.write(f"otelloop: cannot start: {reason}\n")
    sys.stderr.flush()
    return 2
