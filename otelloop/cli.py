"""Command line: ``otelloop serve | check-config | analyze | demo`` (see the README)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

import click
import yaml

from otelloop.config import ConfigError, check_files, effective_config, load_config
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


@click.group()
@click.version_option(full_version(), prog_name="otelloop", message=(
    f"%(prog)s %(version)s ({'native' if scan.NATIVE else 'pure-Python'} request reader)"))
def main() -> None:
    """otelloop: tells when AI agents are stuck in loops, from their OpenTelemetry spans."""


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--upstream", help="Forward to grpc://host:port, host:port, grpcs://…, or http(s)://host:port[/path].")
@click.option("--grpc-endpoint", help="OTLP/gRPC listen address (default localhost:4317; port 0 picks one).")
@click.option("--http-endpoint", help="OTLP/HTTP listen address (default localhost:4318).")
@click.option("--admin-endpoint", help="Admin listen address for /metrics, /healthz, /readyz, /v1/sessions "
                                       "(default localhost:9464).")
@click.option("--group-by", type=click.Choice(["trace", "session"]), help="Group steps into sessions by trace or "
                                                                           "by session attribute.")
@click.option("--ready-file", type=click.Path(dir_okay=False), help="Write the bound addresses here as JSON "
                                                                     "once ready.")
def serve(config_path: str | None, upstream: str | None, grpc_endpoint: str | None, http_endpoint: str | None,
          admin_endpoint: str | None, group_by: str | None, ready_file: str | None) -> None:
    """Run the service: receive OTLP, detect loops, forward enriched spans."""
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
    """Validate FILE and print the effective configuration."""
    config = _load(file, {}, files=True)
    click.echo(yaml.safe_dump(effective_config(config), sort_keys=False), nl=False)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--output", type=click.File("w"), help="Write the enriched spans here as OTLP/JSON lines.")
@click.option("--fail-on", type=click.Choice(["nudge", "stop"]), help="Exit 1 if a session reaches this verdict.")
def analyze(files: tuple[str, ...], config_path: str | None, as_json: bool, output: Any, fail_on: str | None) -> None:
    """Run the detectors offline over recorded OTLP FILES and print findings per session."""
    from otelloop.analyze import InputError, render_table, worst_verdict
    from otelloop.analyze import analyze as run

    config = _load(config_path, {})
    try:
        reports = run(list(files), config, output)
    except (InputError, OSError) as e:
        click.echo(f"otelloop: {e}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps({"sessions": [asdict(r) for r in reports]}, indent=2, default=str))
    else:
        click.echo(render_table(reports), nl=False)
    if fail_on and VERDICT_RANK[worst_verdict(reports)] >= VERDICT_RANK[fail_on]:
        sys.exit(1)


@main.command()
@click.option("--steps", default=8, show_default=True, help="How many times the simulated agent repeats itself.")
def demo(steps: int) -> None:
    """Watch otelloop catch a looping agent, with nothing else installed."""
    from otelloop.demo import run_demo

    sys.exit(run_demo(steps))
