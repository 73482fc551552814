"""Probe: ``otelloop check-config`` and configuration errors never print a credential.

Figures held, with a configuration that sets every credential otelloop takes (two receiver tokens, the
admin and agent tokens, two exporter headers, a password and an API key in the exporter URL): 0 of the
9 values appear in ``check-config``'s output (before: 3, ``admin.agent_token`` and both parts of the URL),
and 0 of 2 in the errors of a file that gives credentials the wrong type (before: 2, each quoted in its
``got …``). Every field whose name looks like a credential is marked secret in its model, so a new one
cannot be forgotten by the masking.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from pydantic import BaseModel

from otelloop.config import MASK, Config, Secret, build_config, effective_config, secret_marker

SECRETS = {
    "receiver": {"auth": {"bearer_tokens": ["recv-tok-1-Zq8", "recv-tok-2-Zq8"]}},
    "exporter": {"endpoint": "https://svc-user:url-pass-Zq8@upstream.example:4318/v1/traces?api_key=url-key-Zq8",
                 "headers": {"Authorization": "Bearer header-tok-Zq8", "x-api-key": "header-key-Zq8"}},
    "admin": {"token": "admin-tok-Zq8", "agent_token": "agent-tok-Zq8"},
}
VALUES = ["recv-tok-1-Zq8", "recv-tok-2-Zq8", "svc-user", "url-pass-Zq8", "url-key-Zq8", "header-tok-Zq8",
          "header-key-Zq8", "admin-tok-Zq8", "agent-tok-Zq8"]

#: Field names that hold credentials unless they name where to read them (``*_file``, ``*_env``).
CREDENTIAL_NAME = re.compile(r"token|passw|secret|credential|api_?key|headers|auth_?header|cookie|endpoint$")
NOT_A_CREDENTIAL = re.compile(r"_(file|env)$")


def _check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otelloop", "check-config", str(path)], capture_output=True,
                          text=True, timeout=60)


def test_check_config_prints_no_credential(tmp_path: Path) -> None:
    path = tmp_path / "otelloop.yaml"
    path.write_text(yaml.safe_dump(SECRETS))
    done = _check_config(path)
    assert done.returncode == 0, done.stderr
    shown = [v for v in VALUES if v in done.stdout + done.stderr]
    assert shown == [], done.stdout
    printed = yaml.safe_load(done.stdout)
    assert printed["receiver"]["auth"]["bearer_tokens"] == [MASK, MASK]
    assert printed["exporter"]["headers"] == {"Authorization": MASK, "x-api-key": MASK}
    assert printed["exporter"]["endpoint"] == f"https://{MASK}@upstream.example:4318/v1/traces?api_key={MASK}"
    assert printed["admin"]["token"] == MASK and printed["admin"]["agent_token"] == MASK


def test_configuration_errors_do_not_quote_credentials(tmp_path: Path) -> None:
    path = tmp_path / "otelloop.yaml"
    path.write_text(yaml.safe_dump({"admin": {"token": ["list-tok-Zq8"], "agent_token": 4242424242},
                                    "receiver": {"grpc": {"max_request_mib": "much"}}}))
    done = _check_config(path)
    assert done.returncode == 2
    assert "list-tok-Zq8" not in done.stderr and "4242424242" not in done.stderr
    assert "admin.token: must be a string or null, got *** (not shown: a secret)" in done.stderr
    assert "admin.agent_token: must be a string or null" in done.stderr
    assert 'receiver.grpc.max_request_mib: must be a number > 0, got "much"' in done.stderr  # others quoted


def _fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, type[BaseModel], str]]:
    """(dotted path, model, field name) of every field of ``model``, sections included, at any depth."""
    out = []
    for name, info in model.model_fields.items():
        out.append((prefix + name, model, name))
        for t in (info.annotation, *get_args(info.annotation)):
            for inner in (t, *get_args(t)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    out += _fields(inner, f"{prefix}{name}.")
    return out


def test_every_credential_like_field_is_marked_secret() -> None:
    fields = _fields(Config)
    credential_like = [path for path, model, name in fields
                       if CREDENTIAL_NAME.search(name) and not NOT_A_CREDENTIAL.search(name)
                       and "str" in str(model.model_fields[name].annotation)  # not a flag or a number
                       and not path.endswith(".grpc.endpoint") and not path.endswith(".http.endpoint")
                       and path != "admin.endpoint"]  # listen addresses (host:port)
    unmarked = [path for path, model, name in fields if path in credential_like and secret_marker(model, name) is None]
    assert unmarked == []
    marked = sorted(path for path, model, name in fields if secret_marker(model, name) is not None)
    assert marked == ["admin.agent_token", "admin.token", "exporter.endpoint", "exporter.headers",
                      "receiver.auth.bearer_tokens"]


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for p in parents:
        data = data.setdefault(p, {})
    data[last] = value


@pytest.mark.parametrize("path", ["admin.agent_token", "admin.token", "exporter.endpoint", "exporter.headers",
                                  "receiver.auth.bearer_tokens"])
def test_every_secret_field_is_masked_by_effective_config(path: str) -> None:
    model: type[BaseModel] = Config
    *sections, name = path.split(".")
    for section in sections:
        model = model.model_fields[section].annotation  # type: ignore[assignment]
    assert isinstance(secret_marker(model, name), Secret)
    annotation = str(model.model_fields[name].annotation)
    value: Any = ({"x-secret": "zz-secret-Zq8"} if "dict" in annotation else ["zz-secret-Zq8"] if "list" in annotation
                  else "https://u:zz-secret-Zq8@h:4318" if name == "endpoint" else "zz-secret-Zq8")
    raw: dict[str, Any] = {}
    _set(raw, path, value)
    assert "zz-secret-Zq8" not in yaml.safe_dump(effective_config(build_config(raw, env={})))


def test_an_unreadable_agent_token_file_is_a_configuration_error(tmp_path: Path) -> None:
    """Like every other file the configuration names: reported before any port opens (before, check-config
    passed it and serve failed at start)."""
    path = tmp_path / "otelloop.yaml"
    path.write_text(yaml.safe_dump({"admin": {"agent_token_file": str(tmp_path / "missing.token")}}))
    done = _check_config(path)
    assert done.returncode == 2 and "admin.agent_token_file: no such file" in done.stderr
