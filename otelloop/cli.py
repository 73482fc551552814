"""Command line: ``otelloop serve | check-config | analyze | demo`` (see the README)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

import click
import yaml

from otelloop import keys, progress
from otelloop.config import ConfigError, check_files, effective_config, load_config
from otelloop.logs import escape
from otelloop.model import VERDICT_RANK
from otelloop.otlp import scan
from otelloop.version import full_version


def _load(path: str | None, overrides: dict[str, Any], files: bool = False):  # type: ignore[no-untyped-def]
    """The validated configuration, or exit 2 with one line per problem. ``files``: also check that the
    files and directories it names are usable (for ``serve`` and ``check-config``)."""
    try:
        config = load_config(path, overrides)
        problems = check_files(config) if files else []
        if problems:
            raise ConfigError(problems)
        return config
    except ConfigError as e:
        for line in e.errors:
            click.echo(f"otelloop: configuration error: {line}", err=True)
        sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(full_version(), prog_name="otelloop", message=(
    f"%(prog)s %(version)s ({'native' if scan.NATIVE else 'pure-Python'} request reader"
    f"{', pure-Python key search' if scan.NATIVE and not keys.NATIVE else ''}"
    f"{', pure-Python progress tracker' if scan.NATIVE and not progress.NATIVE else ''})"))
def main() -> None:
    """otelloop: tells when AI agents are stuck in loops, from their OpenTelemetry spans.

    Run ``otelloop COMMAND -h`` for a command's options and exit codes.
    """


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--upstream", help="Forward to grpc://host:port, host:port, grpcs://…, or http(s)://host:port[/path].")
@click.option("--grpc-endpoint", help="OTLP/gRPC listen address (default localhost:4317; port 0 picks one).")
@click.option("--http-endpoint", help="OTLP/HTTP listen address (default localhost:4318).")
@click.option("--admin-endpoint", help="Admin listen address for /metrics, /healthz, /readyz, /v1/sessions "
                                       "(default localhost:9464).")
@click.option("--group-by", type=click.Choice(["auto", "trace", "session"]),
              help="Group steps into sessions: auto (conversation id when spans carry one, else trace; the "
                   "default), trace, or session (the span's own session attribute).")
@click.option("--ready-file", type=click.Path(dir_okay=False), help="Write the bound addresses here as JSON "
                                                                     "once ready.")
def serve(config_path: str | None, upstream: str | None, grpc_endpoint: str | None, http_endpoint: str | None,
          admin_endpoint: str | None, group_by: str | None, ready_file: str | None) -> None:
    """Run the service: receive OTLP, detect loops, forward enriched spans.

    Listens on localhost unless told otherwise (set 0.0.0.0 where other hosts must reach it, or
    OTELLOOP_LISTEN_HOST for all three listeners). Runs until SIGTERM or SIGINT; SIGHUP reloads the --config file.

    \b
    Exit codes:
      0  stopped by SIGTERM/SIGINT after draining the export queue
      2  invalid configuration, or a listener, certificate or queue directory that cannot be used
         (one line on stderr says which)
    """
    flags = {"exporter.endpoint": upstream, "receiver.grpc.endpoint": grpc_endpoint,
             "receiver.http.endpoint": http_endpoint, "admin.endpoint": admin_endpoint,
             "state.group_by": group_by}
    overrides = {k: v for k, v in flags.items() if v is not None}
    config = _load(config_path, overrides, files=True)
    from otelloop.service import serve as run

    run(config, config_path, overrides, ready_file)


@main.command("check-config")
@click.argument("file", type=click.Path(dir_okay=False))
def check_config(file: str) -> None:
    """Validate FILE and print the effective configuration.

    A misspelt key is reported with the nearest valid one.

    \b
    Exit codes:
      0  FILE is valid (the effective configuration is printed)
      2  FILE is invalid: one line per problem on stderr, naming the key path
    """
    config = _load(file, {}, files=True)
    click.echo(yaml.safe_dump(effective_config(config), sort_keys=False), nl=False)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--output", type=click.File("w"), help="Write the enriched spans here as OTLP/JSON lines.")
@click.option("--fail-on", type=click.Choice(["nudge", "stop"]), help="Exit 1 if a session reaches this verdict.")
@click.option("--allow-empty", is_flag=True, help="Exit 0 when the input holds no agent step (default: exit 3).")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: on a terminal, for inputs of 16 MiB or more).")
def analyze(files: tuple[str, ...], config_path: str | None, as_json: bool, output: Any, fail_on: str | None,
            allow_empty: bool, progress: bool | None) -> None:
    """Run the detectors offline over recorded OTLP FILES and print findings per session.

    Sessions are listed most severe verdict first, each session's findings most severe first, then a
    summary line (sessions, and sessions per verdict, worst first).

    \b
    File formats (told apart by their first bytes; FILES may mix them):
      - the Collector file exporter's proto format: each ExportTraceServiceRequest
        preceded by its length (4 bytes, big-endian)
      - the file exporter's JSON lines: one OTLP/JSON request per line
      - one OTLP/JSON document (an ExportTraceServiceRequest)
      - one binary ExportTraceServiceRequest (.binpb)

    \b
    Exit codes:
      0  analysed; no session reached the --fail-on verdict
      1  a session reached the --fail-on verdict
      2  invalid configuration, or a file that cannot be read as OTLP (the message names
         the file and the line or offset)
      3  the input holds no agent step (empty, or no span maps to a step): a CI gate
         fails closed instead of passing on nothing; --allow-empty makes this 0
    """
    config = _load(config_path, {})
    reports = _run_analysis(list(files), config, output, progress)
    _print_reports(reports, as_json)
    if not reports and not allow_empty:
        click.echo(f"otelloop: no agent steps found in {', '.join(files)}: no span maps to an agent step (or the "
                   "input is empty); check the recording, or pass --allow-empty", err=True)
        sys.exit(3)
    from otelloop.analyze import worst_verdict

    if fail_on and VERDICT_RANK[worst_verdict(reports)] >= VERDICT_RANK[fail_on]:
        sys.exit(1)


def _run_analysis(files: list[str], config: Any, output: Any, progress: bool | None) -> list[Any]:
    """The reports, with a progress bar on stderr when wanted; exit 2 when a file is not OTLP."""
    import os

    from otelloop.analyze import InputError
    from otelloop.analyze import analyze as run
    from otelloop.progressbar import ProgressBar, wanted

    total = sum(os.path.getsize(f) for f in files)
    bar = ProgressBar(total, sys.stderr, sys.stderr.isatty()) if wanted(progress, total, sys.stderr) else None
    try:
        reports = run(files, config, output, progress=bar)
    except (InputError, OSError) as e:
        click.echo(f"otelloop: {escape(str(e), None)}", err=True)  # an input error may quote the input
        sys.exit(2)
    if bar is not None:
        bar.close(total)
    return reports


def _print_reports(reports: list[Any], as_json: bool) -> None:
    from otelloop.analyze import render_table, summary

    if as_json:
        click.echo(json.dumps({"summary": summary(reports), "sessions": [asdict(r) for r in reports]}, indent=2,
                              default=str))
    else:
        click.echo(render_table(reports), nl=False)


@main.command()
@click.option("--steps", default=8, show_default=True, help="How many times the simulated agent repeats itself.")
def demo(steps: int) -> None:
    """Watch otelloop catch a looping agent, with nothing else installed.

    \b
    Exit codes:
      0  otelloop caught the simulated loop
      1  it did not (a bug: please report it)
    """
    from otelloop.demo import run_demo

    sys.exit(run_demo(steps))
