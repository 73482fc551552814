"""Generate docs/configuration.md from the configuration models and the environment variables table.

Everything about a key comes from its model's fields (``model_fields``): its name, its type and bounds,
its default (rendered from the default value itself) and whether it is required. The words come from
docstrings: a section's summary is the first paragraph of its model's docstring, and a key's description
is its entry in the ``Attributes:`` block of the model that declares it (or of a base class below
pydantic's ``BaseModel``). A detector's section is summarised by its detector class. tests/test_docs.py
fails when the committed file is stale, a key is undocumented, or a default stated in a docstring
disagrees with the code. Run: ``python scripts/gen_config_docs.py > docs/configuration.md``.
"""

from __future__ import annotations

import inspect
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from otelloop import config as cfg
from otelloop.detectors.registry import registered
from otelloop.units import parse_duration

REQUIRED = "**required**"

#: Every environment variable otelloop reads (or sets), with what it does. ``tests/test_docs.py`` checks
#: this against the names the code reads.
ENVIRONMENT: tuple[tuple[tuple[str, ...], str], ...] = (
    (("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
     "`exporter.endpoint`. A generic HTTP endpoint gets `/v1/traces` appended, the traces one is used as "
     "is; with protocol `grpc`, `http://` and `https://` mean `grpc://` and `grpcs://`."),
    (("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
     "`exporter.protocol`: `grpc`; any other value means `http/protobuf`."),
    (("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"),
     "`exporter.headers`, as `key1=value1,key2=value2` (URL-encoded)."),
    (("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"),
     "`exporter.compression`: `gzip` or `none`."),
    (("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"),
     "`exporter.timeout`, in milliseconds."),
    (("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"),
     "`exporter.tls.ca_file`: the CA bundle that verifies the upstream."),
    (("OTELLOOP_LOG_LEVEL",),
     "Log level of `otelloop serve`: `DEBUG`, `INFO` (the default), `WARNING` or `ERROR`. Logs go to "
     "stderr and never contain tokens or header values."),
    (("OTELLOOP_LISTEN_HOST",),
     "Replaces `localhost` in the default endpoints of the three listeners (`receiver.grpc.endpoint`, "
     "`receiver.http.endpoint`, `admin.endpoint`) where the file and the flags name none; the container "
     "image sets `0.0.0.0`."),
    (("OTELLOOP_BUILD_COMMIT",),
     "Read when otelloop's package is built, not at run time: the git commit to record in it (for a "
     "build without `.git`, such as the container image's `--build-arg OTELLOOP_BUILD_COMMIT=…`); "
     "otherwise the checkout's HEAD is recorded. `otelloop --version`, `otelloop_build_info{version}` "
     "and the startup log show it as `0.1.0+g<commit>`; run from a git checkout, otelloop asks git."),
    (("OTELLOOP_PURE_PYTHON",),
     "`1` makes otelloop use the pure-Python request reader, key search and progress tracker even where "
     "the native ones are installed (same results, several times the CPU per span; for comparison). "
     "`otelloop --version` names the reader in use."),
    (("OTELLOOP_REQUIRE_NATIVE",),
     "Read when otelloop is installed or its wheel built, not at run time: `1` makes the native reader, "
     "key search and progress tracker mandatory, so a missing C compiler fails `pip install .` instead of falling back "
     "to the pure-Python ones. The container image is built with it."),
    (("the variable named by `receiver.auth.bearer_tokens_env`",),
     "Accepted OTLP bearer tokens, comma-separated; read at start."),
    (("the variable named by `admin.token_env`",),
     "The admin write token; read at start."),
    (("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"),
     "Set to `1`, unless already set, when the `embedding` similarity backend loads its model: the "
     "model comes from the installed `semantic` extra and nothing is downloaded."),
)


@dataclass
class Key:
    """One documented key of a section."""

    path: str
    name: str
    type: str
    default: str
    required: bool
    description: str
    #: the default a docstring states (``Default: …``), checked against the code; None when none
    stated_default: str | None = None
    value: Any = None
    duration: bool = False


@dataclass
class Section:
    """A heading of the reference: a model (or the list of detectors) and its keys."""

    path: str
    summary: str
    details: list[str] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------
# Docstrings

_ATTR = re.compile(r"^ {4}(\w+): (.*)$")
_DEFAULT = re.compile(r"\s*\bDefault: (.*)$", re.S)


def _markdown(text: str) -> str:
    """reStructuredText inline markup of docstrings → Markdown."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``(.+?)``", r"`\1`", text)


def _paragraphs(doc: str) -> list[str]:
    """The prose paragraphs of a docstring, up to its first ``Section:`` block."""
    out = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        if re.match(r"^\w+:\s*$", para.splitlines()[0]):
            break
        out.append(" ".join(line.strip() for line in para.splitlines()))
    return out


def _attributes(doc: str) -> dict[str, str]:
    """The ``Attributes:`` entries of one docstring."""
    out: dict[str, str] = {}
    current: str | None = None
    in_attrs = False
    for line in inspect.cleandoc(doc).splitlines():
        if line.strip() == "Attributes:":
            in_attrs = True
            continue
        if not in_attrs:
            continue
        m = _ATTR.match(line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current and line.startswith(" " * 8):
            out[current] += " " + line.strip()
        elif line.strip():
            in_attrs, current = False, None
    return out


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Description of each field of ``model``: its entry in the docstring of the nearest class of the
    model's own hierarchy (pydantic's ``BaseModel`` and above are not read) that documents it."""
    found: dict[str, str] = {}
    for klass in model.__mro__:
        if klass is BaseModel or not issubclass(klass, BaseModel):
            break
        entries = _attributes(klass.__dict__.get("__doc__") or "")
        for name in model.model_fields:
            if name not in found and name in entries:
                found[name] = entries[name]
    return found


# ---------------------------------------------------------------------------------------------------
# Types and defaults

_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
_SCALARS = {int: "integer", float: "number", bool: "boolean", str: "string", Any: "any value"}


def _flatten(metadata: list[Any]) -> list[Any]:
    out = []
    for m in metadata:
        out += _flatten(m.metadata) if isinstance(m, FieldInfo) else [m]
    return out


def _is_duration(metadata: list[Any], extra: Any = None) -> bool:
    if isinstance(extra, dict) and extra.get("duration"):
        return True
    return any(isinstance(m, FieldInfo) and isinstance(m.json_schema_extra, dict)
               and m.json_schema_extra.get("duration") for m in metadata)


def _bounded(text: str, metadata: list[Any]) -> str:
    bounds = [f"{op} {getattr(m, attr)}" for m in _flatten(metadata) for attr, op in _BOUNDS
              if isinstance(getattr(m, attr, None), (int, float))]
    return f"{text} {', '.join(bounds)}" if bounds else text


def type_text(ann: Any, link: str = "") -> str:
    """A field annotation in words: ``integer >= 1``, ``duration or null``, ``list of strings`` …"""
    origin, args = get_origin(ann), get_args(ann)
    if origin is Annotated:
        base, *extra = args
        return _bounded("duration" if _is_duration(extra) else type_text(base, link), extra)
    if origin in (Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        text = " or ".join(type_text(a, link) for a in present)
        return f"{text} or null" if len(present) < len(args) else text
    if origin is Literal:
        return "one of " + ", ".join(f"`{v}`" for v in args)
    if origin is list:
        inner = type_text(args[0], link)
        return f"list of {inner}s" if inner in ("string", "integer", "number") else f"list of {inner}"
    if origin is dict:
        return f"mapping of {type_text(args[0], link)} to {type_text(args[1], link)}"
    if inspect.isclass(ann) and issubclass(ann, BaseModel):
        return link or "section"
    return _SCALARS.get(ann, getattr(ann, "__name__", str(ann)))


def duration_text(seconds: float) -> str:
    """``1800.0`` → ``30m``: the largest unit that writes the duration exactly, as YAML accepts it."""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000)}ms" if seconds else "0s"


def value_text(value: Any, duration: bool = False) -> str:
    """A default as it would be written in the YAML file."""
    if duration and isinstance(value, (int, float)):
        return duration_text(value)
    text: str = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()
    return text[: -len("\n...")].strip() if text.endswith("\n...") else text


def anchor(path: str) -> str:
    """The anchor GitHub gives the heading of section ``path``."""
    return "#" + re.sub(r"[^\w\- ]", "", path.lower()).replace(" ", "-")


def _child(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """A model nested in a field: ``(model, suffix)`` with suffix ``""``, ``"[]"`` or ``".<name>"``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation, ""
    if origin is list and inspect.isclass(args[0]) and issubclass(args[0], BaseModel):
        return args[0], "[]"
    if origin is dict and inspect.isclass(args[1]) and issubclass(args[1], BaseModel):
        return args[1], ".<name>"
    return None


# ---------------------------------------------------------------------------------------------------
# Sections


def _annotated_duration(ann: Any) -> bool:
    """Whether an annotation is a duration, possibly optional (``Duration | None``)."""
    if get_origin(ann) is Annotated:
        return _is_duration(list(get_args(ann)[1:]))
    return get_origin(ann) in (Union, types.UnionType) and any(_annotated_duration(a) for a in get_args(ann))


def _field_type(info: FieldInfo, link: str, duration: bool) -> str:
    """The field's type with the bounds of its ``Field(...)``, placed before a trailing ``or null``."""
    plain = duration and get_origin(info.annotation) is None
    text = "duration" if plain else type_text(info.annotation, link)
    nullable = text.endswith(" or null")
    text = _bounded(text.removesuffix(" or null"), info.metadata)
    return f"{text} or null" if nullable else text


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text[:1].islower() else text


def _key(path: str, name: str, info: FieldInfo, description: str, child_path: str | None) -> Key:
    link = f"[`{child_path}`]({anchor(child_path)})" if child_path else ""
    duration = _is_duration(info.metadata, info.json_schema_extra) or _annotated_duration(info.annotation)
    text = _field_type(info, link, duration)
    stated = None
    m = _DEFAULT.search(description)
    if m:
        description, stated = description[:m.start()].rstrip(), m.group(1).strip()
    if info.is_required():
        default, value = REQUIRED, None
    else:
        value = info.get_default(call_default_factory=True)
        default = f"see {link}" if isinstance(value, BaseModel) else f"`{value_text(value, duration)}`"
    return Key(f"{path}.{name}" if path else name, name, text, default, info.is_required(),
               _sentence(_markdown(description)), stated, value, duration)


def _model_sections(path: str, model: type[BaseModel], summary: str | None = None,
                    details: list[str] | None = None) -> list[Section]:
    paragraphs = [_markdown(p) for p in _paragraphs(model.__doc__ or "")]
    section = Section(path, summary if summary is not None else (paragraphs[:1] or [""])[0],
                      details if details is not None else paragraphs[1:])
    docs = field_docs(model)
    nested: list[Section] = []
    for name, info in model.model_fields.items():
        if model is cfg.Config and name == "detectors":
            section.keys.append(Key("detectors", name, f"[`detectors`]({anchor('detectors')})",
                                    f"see [`detectors`]({anchor('detectors')})", False,
                                    _sentence(_markdown(docs.get(name, "")))))
            continue
        child = _child(info.annotation)
        child_path = f"{path}.{name}{child[1]}".lstrip(".") if child else None
        section.keys.append(_key(path, name, info, docs.get(name, ""), child_path))
        if child and child_path:
            nested += _model_sections(child_path, child[0])
    return [section, *nested]


def _detector_sections() -> list[Section]:
    detectors = registered()
    top = Section("detectors", "The detectors, each under its own name. Every registered detector runs, with "
                  "the defaults below, unless its section says `enabled: false`.",
                  ["What each detector looks for, and the events, attributes and verdicts it produces, is "
                   "described in [detectors.md](detectors.md)."])
    top.keys.append(Key("detectors.profile", "profile", " \\| ".join(f"`{p}`" for p in cfg.PROFILES),
                        f"`{cfg.DEFAULT_PROFILE}`", False, PROFILE_TEXT, value=cfg.DEFAULT_PROFILE))
    out = [top]
    for name, cls in detectors.items():
        path = f"detectors.{name}"
        summary = _markdown((_paragraphs(cls.__doc__ or "") or [""])[0])
        top.keys.append(Key(path, name, f"[`{path}`]({anchor(path)})", f"see [`{path}`]({anchor(path)})",
                            False, summary))
        notes = [_markdown(p) for p in _paragraphs(cls.Config.__doc__ or "")]
        if notes:  # the config docstring opens with its own key, e.g. "``detectors.rate``."
            notes[0] = re.sub(rf"^`{re.escape(path)}`\.?\s*", "", notes[0])
        sections = _model_sections(path, cls.Config, summary, [n for n in notes if n])
        _note_profiles(sections[0], cls.profiles)
        out += sections
    return out


PROFILE_TEXT = ("The set of detector defaults in force. `default` is tuned on recorded runs of real agent "
                "frameworks to stop loops early and leave healthy repetition alone; `seed` keeps the "
                "strict rules that count repetition whatever its results. A value written in a detector's "
                "section wins over either profile. See [detectors.md](detectors.md#profiles).")


def _note_profiles(section: Section, profiles: dict[str, dict[str, Any]]) -> None:
    """Append each profile's own value to the description of the keys it changes."""
    for key in section.keys:
        for profile, values in profiles.items():
            if key.name in values:
                key.description += f" Under `profile: {profile}`: `{value_text(values[key.name], key.duration)}`."


def sections() -> list[Section]:
    """Every section of the reference, parents before their children; the first is the top level."""
    return _model_sections("", cfg.Config) + _detector_sections()


def all_keys() -> list[Key]:
    return [k for s in sections() for k in s.keys]


# ---------------------------------------------------------------------------------------------------
# Rendering

INTRO = """\
# Configuration reference

Generated from the configuration models by `scripts/gen_config_docs.py`; do not edit by hand.

One YAML file holds every setting (`otelloop serve --config FILE`). Command-line flags override it; the
standard `OTEL_EXPORTER_OTLP_TRACES_*` and `OTEL_EXPORTER_OTLP_*` variables configure the upstream where
the file and the flags are silent (see [Environment variables](#environment-variables)). Every key is
optional unless marked **required**; an unknown key is an error (the message names the nearest valid
key). Durations are written `500ms`, `30s`, `10m`, `1h` or as a number of seconds; sizes in MiB may be
fractional. `otelloop check-config FILE` validates a file and prints the configuration in force, or every
error with its key path.
`kill -HUP` re-reads the file: an invalid one is rejected whole and the settings in force stay; a valid
one applies from the next step, except listener and exporter settings, which need a restart.
"""


def _table(section: Section) -> list[str]:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for k in section.keys:
        lines.append(f"| `{k.name}` | {k.type} | {k.default} | {k.description.replace('|', chr(92) + '|')} |")
    return lines


def _environment() -> list[str]:
    lines = ["## Environment variables", "",
             "Precedence for the upstream: flags, then the file, then `OTEL_EXPORTER_OTLP_TRACES_*`, then "
             "`OTEL_EXPORTER_OTLP_*`, then the defaults.", "",
             "| variable | effect |", "|---|---|"]
    for names, effect in ENVIRONMENT:
        shown = ", ".join(n if n.startswith("the variable") else f"`{n}`" for n in names)
        lines.append(f"| {shown} | {effect} |")
    return lines


def render() -> str:
    lines = [INTRO]
    for s in sections():
        lines += ["## Top-level keys" if not s.path else f"### `{s.path}`", "", s.summary, ""]
        for para in s.details:
            lines += [para, ""]
        lines += [*_table(s), ""]
    lines += _environment()
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------------
# Checks (tests/test_docs.py)


def undocumented() -> list[str]:
    """Keys without a description, and sections without a summary."""
    missing = [k.path for k in all_keys() if not k.description.strip()]
    missing += [f"{s.path or '(top level)'}: no summary" for s in sections() if not s.summary.strip()]
    return sorted(missing)


def stale_defaults() -> list[str]:
    """Keys whose docstring states a default (``Default: …``) that differs from the code's."""
    wrong = []
    for k in all_keys():
        if k.stated_default is None or isinstance(k.value, BaseModel):
            continue
        stated: Any = yaml.safe_load(k.stated_default.rstrip(".").strip("`"))
        if k.duration and isinstance(stated, str):
            stated = parse_duration(stated)
        if stated != k.value:
            wrong.append(f"{k.path}: docstring says {k.stated_default!r}, the code {k.value!r}")
    return wrong


def main(argv: list[str]) -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
