"""The workspace a run works in, and the real tools that act on it.

A workspace is a fresh directory holding, as a scenario asks: a small Python project with real pytest
tests (``src/`` modules, some with seeded bugs, ``tests/``), plain files (notes, configs, data), a local
document index for search, a job/status service and a flaky record service, both backed by JSON files.
Every tool is a plain Python function over that directory; tests run real ``pytest`` in a subprocess.
Nothing leaves the machine.

Tool outputs are deterministic: no absolute paths, no timings (pytest's "in 0.04s" is removed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .project import MODULES

__all__ = ["TOOL_KINDS", "ToolError", "ToolSpec", "Workspace"]


class ToolError(Exception):
    """The tool failed; the message is what the agent sees."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the agent sees it: name, description, parameters (JSON schema), and its implementation."""

    name: str
    kind: str
    description: str
    params: dict[str, tuple[str, str]]  # name -> (json type, description)
    required: tuple[str, ...]

    def schema(self) -> dict[str, Any]:
        return {"type": "object",
                "properties": {k: {"type": t, "description": d} for k, (t, d) in self.params.items()},
                "required": list(self.required), "additionalProperties": False}


_TIMING = re.compile(r" in \d+\.\d+s( \([^)]*\))?")


def _pytest_counts(out: str) -> dict[str, int] | None:
    """Failed/passed counts from pytest's closing line."""
    for line in reversed(out.strip().splitlines()):
        if re.search(r"\b(passed|failed|error|errors|no tests ran)\b", line):
            failed = re.search(r"(\d+) failed", line)
            passed = re.search(r"(\d+) passed", line)
            errors = re.search(r"(\d+) errors?", line)
            return {"failed": int(failed.group(1)) if failed else 0,
                    "passed": int(passed.group(1)) if passed else 0,
                    "errors": int(errors.group(1)) if errors else 0}
    return None


@dataclass
class Workspace:
    """A run's working directory and the state behind its tools."""

    root: Path
    options: dict[str, Any] = field(default_factory=dict)

    # -- setup -------------------------------------------------------------------------------------

    def build(self) -> None:
        """Create what ``options`` asks for (see the keys below)."""
        o = self.options
        (self.root / "src").mkdir(parents=True, exist_ok=True)
        (self.root / "tests").mkdir(exist_ok=True)
        # a Python project: modules (all of MODULES) with ``bugs`` seeded
        bugs = set(o.get("bugs", ()))
        for name in o.get("modules", list(MODULES)[:6]):
            mod = MODULES[name]
            (self.root / "src" / f"{name}.py").write_text(mod.buggy if name in bugs else mod.fixed)
            (self.root / "tests" / f"test_{name}.py").write_text(mod.tests)
        (self.root / "tests" / "conftest.py").write_text(
            "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent.parent / 'src'))\n")
        for rel, text in o.get("files", {}).items():
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        if "docs" in o:
            (self.root / ".index").mkdir(exist_ok=True)
            (self.root / ".index" / "docs.json").write_text(json.dumps(o["docs"], indent=1))
        if "jobs" in o:  # job id -> list of statuses, one per poll (the last one repeats)
            (self.root / ".jobs").mkdir(exist_ok=True)
            for job, schedule in o["jobs"].items():
                (self.root / ".jobs" / f"{job}.json").write_text(json.dumps(
                    {"schedule": schedule, "polls": 0, "result": o.get("job_results", {}).get(job, "")}))
        if "records" in o:  # record id -> (text, failures before success, error message)
            (self.root / ".service").mkdir(exist_ok=True)
            for rid, (text, failures, message) in o["records"].items():
                (self.root / ".service" / f"{rid}.json").write_text(
                    json.dumps({"text": text, "failures": failures, "error": message}))

    def path(self, rel: str) -> Path:
        p = (self.root / rel).resolve()
        if self.root.resolve() not in (p, *p.parents):
            raise ToolError(f"{rel}: outside the workspace")
        return p

    # -- tools -------------------------------------------------------------------------------------

    def read(self, path: str) -> tuple[str, dict[str, Any]]:
        p = self.path(path)
        if not p.is_file():
            raise ToolError(f"No such file: {path}")
        return p.read_text(), {}

    def write(self, path: str, content: str) -> tuple[str, dict[str, Any]]:
        p = self.path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
        return f"Wrote {len(content.encode())} bytes to {path}", {}

    def edit(self, path: str, old: str, new: str) -> tuple[str, dict[str, Any]]:
        p = self.path(path)
        if not p.is_file():
            raise ToolError(f"No such file: {path}")
        text = p.read_text()
        n = text.count(old)
        if n == 0:
            raise ToolError(f"old text not found in {path}")
        if n > 1:
            raise ToolError(f"old text is not unique in {path} ({n} matches)")
        p.write_text(text.replace(old, new))
        return f"Edited {path}: replaced {len(old.splitlines()) or 1} line(s)", {}

    def ls(self, path: str) -> tuple[str, dict[str, Any]]:
        p = self.path(path or ".")
        if not p.is_dir():
            raise ToolError(f"Not a directory: {path}")
        names = sorted(c.name + ("/" if c.is_dir() else "") for c in p.iterdir()
                       if not c.name.startswith((".", "__pycache__")))
        return "\n".join(names), {"hits": len(names)}

    def grep(self, pattern: str, path: str) -> tuple[str, dict[str, Any]]:
        base = self.path(path or ".")
        rx = re.compile(pattern)
        files = [base] if base.is_file() else sorted(q for q in base.rglob("*") if q.is_file()
                                                      and not any(part.startswith(".") or part == "__pycache__"
                                                                  for part in q.relative_to(self.root).parts))
        out = []
        for f in files:
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                if rx.search(line):
                    out.append(f"{f.relative_to(self.root)}:{n}:{line}")
        return "\n".join(out), {"hits": len(out)}

    def search(self, query: str, style: str = "json") -> tuple[str, dict[str, Any]]:
        docs = json.loads((self.root / ".index" / "docs.json").read_text())
        terms = [_stem(w) for w in re.findall(r"[a-z0-9]+", query.lower()) if w not in _STOP]
        found = []
        for d in docs:
            words = {_stem(w) for w in re.findall(r"[a-z0-9]+", (d["title"] + " " + d["text"]).lower())}
            if terms and all(t in words for t in terms):
                found.append(d)
        found = found[:3]
        if style == "json":
            return json.dumps([{"id": d["id"], "title": d["title"], "snippet": d["text"][:160]} for d in found]), \
                {"hits": len(found)}
        if not found:
            return "No matching documents.", {"hits": 0}
        return "\n\n".join(f"[{d['id']}] {d['title']}\n{d['text']}" for d in found), {"hits": len(found)}

    def run_tests(self, target: str = "") -> tuple[str, dict[str, Any]]:
        args = [sys.executable, "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider"]
        if target:
            args.append(target)
        proc = subprocess.run(args, cwd=self.root, capture_output=True, text=True, timeout=120, env=_env())
        out = _TIMING.sub("", proc.stdout + proc.stderr).strip()
        counts = _pytest_counts(out) or {}
        return out, counts

    def shell(self, command: str) -> tuple[str, dict[str, Any]]:
        proc = subprocess.run(command, shell=True, cwd=self.root, capture_output=True, text=True, timeout=120,
                              env=_env())
        out = _TIMING.sub("", proc.stdout + proc.stderr).strip()
        meta: dict[str, Any] = dict(_pytest_counts(out) or {}) if "pytest" in command else {}
        meta["exit"] = proc.returncode
        if proc.returncode:
            out = f"{out}\n[exit code {proc.returncode}]"
        return out, meta

    def status(self, job_id: str) -> tuple[str, dict[str, Any]]:
        p = self.root / ".jobs" / f"{job_id}.json"
        if not p.is_file():
            raise ToolError(f"unknown job {job_id!r}")
        job = json.loads(p.read_text())
        schedule = job["schedule"]
        state = schedule[min(job["polls"], len(schedule) - 1)]
        job["polls"] += 1
        p.write_text(json.dumps(job))
        text = json.dumps({"job_id": job_id, "status": state,
                           **({"result": job["result"]} if state in ("done", "succeeded", "completed")
                              and job["result"] else {})})
        return text, {"status": state}

    def fetch(self, record_id: str) -> tuple[str, dict[str, Any]]:
        p = self.root / ".service" / f"{record_id}.json"
        if not p.is_file():
            raise ToolError(f"404 Not Found: no record {record_id!r}")
        rec = json.loads(p.read_text())
        if rec["failures"] != 0:
            if rec["failures"] > 0:
                rec["failures"] -= 1
                p.write_text(json.dumps(rec))
            raise ToolError(rec["error"])
        return rec["text"], {}


_STOP = frozenset("a an the of for to in on and or is are what how does do with by about from at".split())  # noqa: SIM905


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word



def load_state(ws: Workspace, directory: str, name: str, missing: str) -> Any:
    """A scenario service's JSON state file ``<directory>/<name>`` in the run's workspace; a missing one
    answers as the service would (``missing``, formatted with ``name``)."""
    p = ws.root / directory / name
    if not p.is_file():
        raise ToolError(missing.format(name=name))
    return json.loads(p.read_text())


def save_state(ws: Workspace, directory: str, name: str, data: Any) -> None:
    """Write a scenario service's JSON state file (see :func:`load_state`)."""
    (ws.root / directory / name).write_text(json.dumps(data, indent=1, ensure_ascii=False))

def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTEST_"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # the project's tests need no plugin; the frameworks installed next to pytest bring slow ones
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.pop("PYTHONPATH", None)
    return env


# -- tool kinds: how each is exposed (names, parameters, descriptions) ---------------------------------

#: kind -> variants of (name, description, {param: (type, description)}, required, argument mapping).
#: The argument mapping renames the exposed parameters to the workspace method's.
TOOL_KINDS: dict[str, list[tuple[str, str, dict[str, tuple[str, str]], tuple[str, ...], dict[str, str]]]] = {
    "read": [
        ("read_file", "Read a text file from the workspace and return its content.",
         {"path": ("string", "Path relative to the workspace root.")}, ("path",), {"path": "path"}),
        ("cat", "Print a file.", {"file": ("string", "File to print.")}, ("file",), {"file": "path"}),
        ("open_file", "Open a file and return its full text.",
         {"file_path": ("string", "Relative path of the file.")}, ("file_path",), {"file_path": "path"}),
        ("view", "View the contents of a file in the repository.",
         {"path": ("string", "File to view.")}, ("path",), {"path": "path"}),
    ],
    "write": [
        ("write_file", "Create or overwrite a file with the given content.",
         {"path": ("string", "Relative path."), "content": ("string", "Full new content.")},
         ("path", "content"), {"path": "path", "content": "content"}),
        ("create_file", "Write a whole file (creates directories as needed).",
         {"file_path": ("string", "Where to write."), "text": ("string", "The file's text.")},
         ("file_path", "text"), {"file_path": "path", "text": "content"}),
        ("save", "Save text to a file, replacing what was there.",
         {"filename": ("string", "File name."), "content": ("string", "Text to save.")},
         ("filename", "content"), {"filename": "path", "content": "content"}),
    ],
    "edit": [
        ("str_replace", "Replace one exact, unique occurrence of old_str with new_str in a file.",
         {"path": ("string", "File to edit."), "old_str": ("string", "Exact text to replace."),
          "new_str": ("string", "Replacement text.")}, ("path", "old_str", "new_str"),
         {"path": "path", "old_str": "old", "new_str": "new"}),
        ("edit", "Edit a file by replacing a snippet.",
         {"file_path": ("string", "File."), "old": ("string", "Snippet to find."), "new": ("string", "New snippet.")},
         ("file_path", "old", "new"), {"file_path": "path", "old": "old", "new": "new"}),
        ("edit_file", "Apply a find-and-replace edit to one file.",
         {"path": ("string", "File."), "find": ("string", "Text to find (must be unique)."),
          "replace": ("string", "Text to put instead.")}, ("path", "find", "replace"),
         {"path": "path", "find": "old", "replace": "new"}),
    ],
    "ls": [
        ("list_dir", "List the entries of a directory.", {"path": ("string", "Directory.")}, ("path",),
         {"path": "path"}),
        ("ls", "List files.", {"dir": ("string", "Directory to list.")}, ("dir",), {"dir": "path"}),
    ],
    "grep": [
        ("grep", "Search files for a regular expression; prints file:line:text.",
         {"pattern": ("string", "Regular expression."), "path": ("string", "File or directory.")},
         ("pattern", "path"), {"pattern": "pattern", "path": "path"}),
        ("search_code", "Find lines of code matching a pattern.",
         {"regex": ("string", "Pattern."), "where": ("string", "Directory to search.")}, ("regex", "where"),
         {"regex": "pattern", "where": "path"}),
    ],
    "search": [
        ("search", "Search the knowledge base; returns a JSON list of hits.",
         {"query": ("string", "Search terms.")}, ("query",), {"query": "query"}),
        ("web_search", "Search the (internal) web index for pages matching a query.",
         {"q": ("string", "The query.")}, ("q",), {"q": "query"}),
        ("lookup_docs", "Look up the product documentation.",
         {"query": ("string", "What to look for.")}, ("query",), {"query": "query"}),
        ("search_docs", "Full-text search over the docs.", {"text": ("string", "Words to search for.")},
         ("text",), {"text": "query"}),
    ],
    "tests": [
        ("run_tests", "Run the project's test suite (pytest) and return its output.",
         {"target": ("string", "Optional test file or node id; empty for all.")}, (), {"target": "target"}),
        ("pytest", "Run pytest.", {"args": ("string", "Test path to run, or empty.")}, (), {"args": "target"}),
    ],
    "shell": [
        ("bash", "Run a bash command in the workspace and return stdout and stderr.",
         {"command": ("string", "The command.")}, ("command",), {"command": "command"}),
        ("shell", "Execute a shell command.", {"cmd": ("string", "Command line.")}, ("cmd",), {"cmd": "command"}),
        ("run_command", "Run a terminal command and get its output.",
         {"command": ("string", "Command to run.")}, ("command",), {"command": "command"}),
    ],
    "status": [
        ("check_status", "Check the status of a background job.", {"job_id": ("string", "Job id.")},
         ("job_id",), {"job_id": "job_id"}),
        ("get_job", "Get a job's current state.", {"id": ("string", "The job id.")}, ("id",), {"id": "job_id"}),
        ("poll_job", "Poll a long-running job once.", {"job": ("string", "Job identifier.")}, ("job",),
         {"job": "job_id"}),
    ],
    "fetch": [
        ("fetch_record", "Fetch a record from the records service.", {"record_id": ("string", "Record id.")},
         ("record_id",), {"record_id": "record_id"}),
        ("get_invoice", "Get an invoice from the billing service.", {"invoice_id": ("string", "Invoice id.")},
         ("invoice_id",), {"invoice_id": "record_id"}),
        ("http_get", "GET a resource from the internal API by its id.", {"resource": ("string", "Resource id.")},
         ("resource",), {"resource": "record_id"}),
    ],
}

_METHOD = {"read": "read", "write": "write", "edit": "edit", "ls": "ls", "grep": "grep", "search": "search",
           "tests": "run_tests", "shell": "shell", "status": "status", "fetch": "fetch"}


@dataclass(frozen=True)
class BoundTool:
    """A tool spec bound to its argument mapping; ``run`` executes it on a workspace."""

    spec: ToolSpec
    mapping: dict[str, str]

    def run(self, ws: Workspace, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        unknown = set(args) - set(self.mapping)
        if unknown:
            raise ToolError(f"unexpected argument(s): {', '.join(sorted(unknown))}")
        kw = {self.mapping[k]: v for k, v in args.items()}
        method: Callable[..., tuple[str, dict[str, Any]]] = getattr(ws, _METHOD[self.spec.kind])
        if self.spec.kind == "search":
            kw["style"] = "json" if self.spec.name in ("search", "web_search") else "text"
        return method(**kw)


def make_tool(kind: str, variant: int) -> BoundTool:
    variants = TOOL_KINDS[kind]
    name, desc, params, required, mapping = variants[variant % len(variants)]
    return BoundTool(ToolSpec(name, kind, desc, params, required), mapping)
