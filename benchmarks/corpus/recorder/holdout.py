"""The held-out set: the twelve scenario classes told again with other tasks, tools, domains and wording.

The corpus (``scenarios.py``) is what otelloop's defaults are measured on; this set is recorded the same
way (same drivers, capture, script checks) but from stories written separately: a data pipeline with SQL,
a web-research agent, an ops agent with a kubectl-like tool, a docs writer with a link checker, a
customer-support agent with ticket and CRM tools, and refactoring agents whose test runners word their
results differently. The tools are real functions over the run's workspace (a SQLite warehouse, a page
store, a simulated cluster, a helpdesk, real ``pytest`` and ``unittest`` runs); their names, parameters
and outputs are this module's own.

``python benchmarks/corpus/record.py --holdout`` records it into ``benchmarks/holdout/``.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .builder import Builder
from .drivers import DIALECTS
from .script import OK, Call, Expect, Scenario, contains, error, failing, hits, status
from .workspace import ToolError, ToolSpec, Workspace, _env, load_state, save_state

EMPTY = Expect("empty")
STATE = ".hold"

#: Frameworks run parallel calls in threads: the state files (and the warehouse) are read and written
#: under one lock, so two calls never see a half-written file.
_LOCK = threading.RLock()


def _locked(fn: Callable[..., tuple[str, dict[str, Any]]]) -> Callable[..., tuple[str, dict[str, Any]]]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> tuple[str, dict[str, Any]]:
        with _LOCK:
            return fn(*args, **kwargs)
    return wrapper


# -- tools: exposed name, parameters, and a real implementation over the workspace -------------------------------


@dataclass(frozen=True)
class HoldTool:
    """A tool with its own implementation: ``fn(ws, **args)`` returns (text, meta) or raises ToolError."""

    spec: ToolSpec
    fn: Callable[..., tuple[str, dict[str, Any]]]

    def run(self, ws: Workspace, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        unknown = set(args) - set(self.spec.params)
        if unknown:
            raise ToolError(f"unexpected argument(s): {', '.join(sorted(unknown))}")
        return self.fn(ws, **args)


class HB(Builder):
    """A builder whose tools are declared by the scenario (name, description, parameters, implementation)."""

    def use(self, name: str, desc: str, params: dict[str, str], fn: Callable[..., tuple[str, dict[str, Any]]],
            optional: tuple[str, ...] = ()) -> Callable[..., Call]:
        spec = ToolSpec(name, "holdout", desc, {p: ("string", d) for p, d in params.items()},
                        tuple(p for p in params if p not in optional))
        self.tools[name] = HoldTool(spec, fn)  # type: ignore[assignment]

        def make(expect: Expect = OK, **kw: Any) -> Call:
            assert set(kw) <= set(params), (name, kw)
            # an optional parameter left out is passed empty, as most frameworks fill it in
            return Call(name, {p: kw.get(p, "") for p in params if p in kw or p in optional}, expect)
        return make


def _load(ws: Workspace, name: str) -> Any:
    return load_state(ws, STATE, name, "service unavailable: {name} is not configured")


def _save(ws: Workspace, name: str, data: Any) -> None:
    save_state(ws, STATE, name, data)


_STOP = frozenset(["a", "an", "the", "of", "for", "to", "in", "on", "and", "or", "is", "are", "what", "how", "does", "do", "with", "by", "about", "from", "at", "can", "i", "my", "we", "our", "it", "its", "be"])


def _terms(text: str) -> set[str]:
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP}


# files ------------------------------------------------------------------------------------------------------


def f_read(ws: Workspace, path: str) -> tuple[str, dict[str, Any]]:
    p = ws.path(path)
    if not p.is_file():
        raise ToolError(f"ENOENT: {path} does not exist")
    return p.read_text(), {}


def f_write(ws: Workspace, path: str, body: str) -> tuple[str, dict[str, Any]]:
    p = ws.path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(body)
    return f"saved {path} ({len(body.splitlines())} lines)", {}


def f_patch(ws: Workspace, path: str, find: str, replace: str) -> tuple[str, dict[str, Any]]:
    p = ws.path(path)
    if not p.is_file():
        raise ToolError(f"ENOENT: {path} does not exist")
    text = p.read_text()
    n = text.count(find)
    if n != 1:
        raise ToolError(f"patch rejected: search text found {n} times in {path} (needs exactly one)")
    p.write_text(text.replace(find, replace))
    return f"patched {path}", {}


def f_list(ws: Workspace, path: str) -> tuple[str, dict[str, Any]]:
    p = ws.path(path or ".")
    if not p.is_dir():
        raise ToolError(f"not a folder: {path}")
    names = sorted(str(q.relative_to(p)) for q in p.rglob("*") if q.is_file()
                   and not any(s.startswith(".") or s == "__pycache__" for s in q.relative_to(ws.root).parts))
    return "\n".join(names), {"hits": len(names)}


def f_search_code(ws: Workspace, pattern: str, path: str) -> tuple[str, dict[str, Any]]:
    base = ws.path(path or ".")
    rx = re.compile(pattern)
    out = []
    for q in sorted(base.rglob("*.py")):
        if "__pycache__" in q.parts:
            continue
        for n, line in enumerate(q.read_text().splitlines(), 1):
            if rx.search(line):
                out.append(f"{q.relative_to(ws.root)} L{n}: {line.strip()}")
    return ("\n".join(out) or "no matches"), {"hits": len(out)}


# test runners -----------------------------------------------------------------------------------------------


def run_checks(ws: Workspace, scope: str = "") -> tuple[str, dict[str, Any]]:
    """pytest underneath, reported in this runner's own words."""
    args = [sys.executable, "-m", "pytest", "-q", "-rf", "--tb=no", "-p", "no:cacheprovider"]
    if scope:
        args.append(scope)
    proc = subprocess.run(args, check=False, cwd=ws.root, capture_output=True, text=True, timeout=120, env=_env())
    out = proc.stdout + proc.stderr
    fails = [ln[len("FAILED "):] for ln in out.splitlines() if ln.startswith("FAILED ")]
    m_f = re.search(r"(\d+) failed", out)
    m_p = re.search(r"(\d+) passed", out)
    nf, np_ = int(m_f.group(1)) if m_f else 0, int(m_p.group(1)) if m_p else 0
    if not (m_f or m_p):
        return "check run broken:\n" + out.strip()[-600:], {"failed": -1}
    if nf == 0:
        return f"checks: all {np_} green", {"failed": 0, "passed": np_}
    lines = [f"  x {f}" for f in fails]
    return f"checks: {nf} red, {np_} green\n" + "\n".join(lines), {"failed": nf, "passed": np_}


def sh(ws: Workspace, cmdline: str) -> tuple[str, dict[str, Any]]:
    proc = subprocess.run(cmdline, shell=True, check=False, cwd=ws.root, capture_output=True, text=True,
                          timeout=120, env=_env())
    out = re.sub(r"Ran (\d+) tests? in [0-9.]+s", r"Ran \1 tests", (proc.stdout + proc.stderr)).strip()
    return f"$ {cmdline}\n{out}\n(exit status {proc.returncode})", {"exit": proc.returncode}


# docs site: a real link checker ---------------------------------------------------------------------------


def build_docs(ws: Workspace, strict: str = "") -> tuple[str, dict[str, Any]]:
    root = ws.path("docs")
    pages = sorted(root.rglob("*.md"))
    broken = []
    for p in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", p.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            if not (p.parent / target).resolve().is_file():
                broken.append(f"WARNING {p.relative_to(ws.root)}: link target not found: {target}")
    if not broken:
        return f"site built: {len(pages)} pages, 0 warnings", {"failed": 0}
    return (f"site built with warnings: {len(pages)} pages\n" + "\n".join(broken)
            + f"\n{len(broken)} broken link(s)"), {"failed": len(broken)}


# SQL warehouse --------------------------------------------------------------------------------------------------


def _db(ws: Workspace) -> sqlite3.Connection:
    path = ws.root / STATE / "warehouse.db"
    fresh = not path.exists()
    con = sqlite3.connect(path)
    if fresh:
        con.executescript((ws.root / STATE / "warehouse.sql").read_text())
        con.commit()
    return con


@_locked
def run_sql(ws: Workspace, query: str) -> tuple[str, dict[str, Any]]:
    con = _db(ws)
    try:
        cur = None
        for stmt in [s for s in query.split(";") if s.strip()]:
            cur = con.execute(stmt)
        con.commit()
        if cur is None or cur.description is None:
            return "statement ok", {}
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
        body = "\t".join(cols) + "\n" + "\n".join("\t".join(str(v) for v in r) for r in rows)
        return f"{body}\n({len(rows)} row{'s' if len(rows) != 1 else ''})", {"hits": len(rows)}
    except sqlite3.Error as e:
        raise ToolError(f"SQL error: {e}") from None
    finally:
        con.close()


@_locked
def describe_table(ws: Workspace, table: str) -> tuple[str, dict[str, Any]]:
    con = _db(ws)
    try:
        cols = con.execute(f"PRAGMA table_info({table})").fetchall()
    finally:
        con.close()
    if not cols:
        raise ToolError(f"relation {table!r} does not exist")
    return f"{table}\n" + "\n".join(f"  {c[1]:<16} {c[2] or 'ANY'}{' NOT NULL' if c[3] else ''}" for c in cols), {}


@_locked
def list_tables(ws: Workspace, schema: str = "") -> tuple[str, dict[str, Any]]:
    con = _db(ws)
    try:
        rows = con.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table','view') ORDER BY name").fetchall()
    finally:
        con.close()
    return "\n".join(f"{n} ({t})" for t, n in rows), {"hits": len(rows)}


@_locked
def search_catalog(ws: Workspace, keywords: str) -> tuple[str, dict[str, Any]]:
    entries = _load(ws, "catalog.json")
    want = _terms(keywords)
    found = [e for e in entries if want and want <= _terms(e["name"] + " " + e["about"])]
    if not found:
        return "catalog: 0 datasets", {"hits": 0}
    return "\n".join(f"{e['name']}: {e['about']}" for e in found), {"hits": len(found)}


def _poll(ws: Workspace, store: str, key: str) -> str:
    data = _load(ws, store)
    if key not in data:
        raise ToolError(f"no such run: {key}")
    item = data[key]
    state = item["schedule"][min(item["polls"], len(item["schedule"]) - 1)]
    item["polls"] += 1
    _save(ws, store, data)
    return str(state)


@_locked
def pipeline_status(ws: Workspace, run_id: str) -> tuple[str, dict[str, Any]]:
    state = _poll(ws, "pipelines.json", run_id)
    info = _load(ws, "pipelines.json")[run_id]
    step = info.get("steps", {}).get(state, "")
    return json.dumps({"run": run_id, "state": state, **({"detail": step} if step else {})}), {"status": state}


@_locked
def trigger_pipeline(ws: Workspace, dag: str) -> tuple[str, dict[str, Any]]:
    data = _load(ws, "pipelines.json")
    for run_id, info in data.items():
        if info.get("dag") == dag:
            return f"queued {dag}: run_id={run_id}", {}
    raise ToolError(f"unknown pipeline {dag}")


# web pages --------------------------------------------------------------------------------------------------


@_locked
def search_web(ws: Workspace, query: str) -> tuple[str, dict[str, Any]]:
    pages = _load(ws, "web.json")
    want = _terms(query)
    found = [(u, p) for u, p in pages.items() if want and want <= _terms(p["title"] + " " + p["body"])][:4]
    if not found:
        return f'No results for "{query}".', {"hits": 0}
    return "\n".join(f"{k}. {p['title']}\n   {u}\n   {p['body'][:160]}" for k, (u, p) in enumerate(found, 1)), \
        {"hits": len(found)}


@_locked
def fetch_url(ws: Workspace, url: str) -> tuple[str, dict[str, Any]]:
    pages = _load(ws, "web.json")
    page = pages.get(url)
    if page is None:
        raise ToolError(f"HTTP 404 Not Found: {url}")
    if page.get("fail", 0):
        if page["fail"] > 0:
            page["fail"] -= 1
            _save(ws, "web.json", pages)
        raise ToolError(page["error"])
    return f"# {page['title']}\n\n{page['body']}", {}


# helpdesk ---------------------------------------------------------------------------------------------------


@_locked
def list_tickets(ws: Workspace, queue: str) -> tuple[str, dict[str, Any]]:
    desk = _load(ws, "helpdesk.json")
    rows = [f"{tid}  [{t['status']}]  {t['subject']}" for tid, t in desk["tickets"].items() if t["queue"] == queue]
    return ("\n".join(rows) or f"queue {queue} is empty"), {"hits": len(rows)}


@_locked
def get_ticket(ws: Workspace, ticket_id: str) -> tuple[str, dict[str, Any]]:
    t = _load(ws, "helpdesk.json")["tickets"].get(ticket_id)
    if t is None:
        raise ToolError(f"ticket {ticket_id} not found")
    thread = "".join(f"\n--- reply ---\n{r}" for r in t.get("replies", []))
    return (f"{ticket_id} | {t['status']} | from {t['customer']}\nSubject: {t['subject']}\n\n{t['body']}{thread}"), {}


@_locked
def reply_ticket(ws: Workspace, ticket_id: str, message: str) -> tuple[str, dict[str, Any]]:
    desk = _load(ws, "helpdesk.json")
    t = desk["tickets"].get(ticket_id)
    if t is None:
        raise ToolError(f"ticket {ticket_id} not found")
    t.setdefault("replies", []).append(message)
    t["status"] = "pending-customer"
    _save(ws, "helpdesk.json", desk)
    return f"reply posted to {ticket_id}; status is now pending-customer", {}


@_locked
def search_kb(ws: Workspace, terms: str) -> tuple[str, dict[str, Any]]:
    desk = _load(ws, "helpdesk.json")
    want = _terms(terms)
    found = [a for a in desk["kb"] if want and want <= _terms(a["title"] + " " + a["text"])][:3]
    if not found:
        return "No articles matched.", {"hits": 0}
    return "\n\n".join(f"{a['id']} — {a['title']}\n{a['text']}" for a in found), {"hits": len(found)}


@_locked
def crm_lookup(ws: Workspace, email: str) -> tuple[str, dict[str, Any]]:
    desk = _load(ws, "helpdesk.json")
    c = desk["customers"].get(email)
    if c is None:
        raise ToolError(f"CRM: no customer with email {email}")
    if c.get("fail", 0):
        if c["fail"] > 0:
            c["fail"] -= 1
            _save(ws, "helpdesk.json", desk)
        raise ToolError(c["error"])
    return json.dumps({k: v for k, v in c.items() if k not in ("fail", "error")}), {}


# cluster ----------------------------------------------------------------------------------------------------


@_locked
def kubectl(ws: Workspace, args: str) -> tuple[str, dict[str, Any]]:
    cl = _load(ws, "cluster.json")
    argv = shlex.split(args)
    ns = "default"
    if "-n" in argv:
        k = argv.index("-n")
        ns = argv[k + 1]
        argv = argv[:k] + argv[k + 2:]
    space = cl["namespaces"].get(ns)
    if not argv:
        raise ToolError("error: you must specify a command")
    if argv[0] == "apply" and argv[1:2] == ["-f"]:
        path = argv[2]
        text = ws.path(path).read_text()
        name = re.search(r"name:\s*(\S+)", text).group(1)  # type: ignore[union-attr]
        last = cl.setdefault("applied", {}).get(path)
        cl["applied"][path] = text
        _save(ws, "cluster.json", cl)
        return f"deployment.apps/{name} {'unchanged' if last == text else 'configured'}", {}
    if space is None:
        raise ToolError(f'Error from server (NotFound): namespaces "{ns}" not found')
    if argv[:2] == ["get", "pods"]:
        rows = ["NAME                              READY   STATUS             RESTARTS"]
        rows += [f"{p[0]:<34}{p[1]:<8}{p[2]:<19}{p[3]}" for p in space["pods"]]
        return "\n".join(rows), {}
    if argv[:2] == ["get", "deployments"]:
        rows = ["NAME            READY   UP-TO-DATE   AVAILABLE"]
        rows += [f"{d[0]:<16}{d[1]:<8}{d[2]:<13}{d[3]}" for d in space["deployments"]]
        return "\n".join(rows), {}
    if argv[:2] == ["get", "events"]:
        return "\n".join(space["events"]) or "No resources found.", {}
    if argv[0] == "logs" and len(argv) > 1:
        if argv[1] not in space["logs"]:
            raise ToolError(f'Error from server (NotFound): pods "{argv[1]}" not found')
        return space["logs"][argv[1]], {}
    if argv[:2] == ["describe", "pod"] and len(argv) > 2:
        pod = next((p for p in space["pods"] if p[0] == argv[2]), None)
        if pod is None:
            raise ToolError(f'Error from server (NotFound): pods "{argv[2]}" not found')
        return (f"Name: {pod[0]}\nNamespace: {ns}\nStatus: {pod[2]}\nRestart Count: {pod[3]}\n"
                + space.get("describe", {}).get(pod[0], "")), {}
    if argv[:2] == ["rollout", "status"] and len(argv) > 2:
        key = f"{ns}/{argv[2]}"
        r = cl["rollouts"].get(key)
        if r is None:
            raise ToolError(f"error: {argv[2]} not found")
        line = r["schedule"][min(r["polls"], len(r["schedule"]) - 1)]
        r["polls"] += 1
        _save(ws, "cluster.json", cl)
        return line, {"status": line}
    if argv[:2] == ["rollout", "restart"] and len(argv) > 2:
        return f"{argv[2].replace('deployment/', 'deployment.apps/')} restarted", {}
    raise ToolError(f"error: unsupported command: kubectl {args}")


@_locked
def service_health(ws: Workspace, service: str) -> tuple[str, dict[str, Any]]:
    state = _poll(ws, "health.json", service)
    return f"{service}: {state}", {"status": state}


@_locked
def restart_service(ws: Workspace, service: str) -> tuple[str, dict[str, Any]]:
    _load(ws, "health.json")
    return f"restart of {service} requested", {}


@_locked
def query_metrics(ws: Workspace, service: str, metric: str) -> tuple[str, dict[str, Any]]:
    m = _load(ws, "metrics.json").get(service, {}).get(metric)
    if m is None:
        raise ToolError(f"no series {metric} for {service}")
    return f"{service} {metric} (last 15m): {m}", {}


# -- tool declarations (name, description, params) --------------------------------------------------------------


def sql_tools(b: HB) -> dict[str, Callable[..., Call]]:
    return {
        "sql": b.use("run_sql", "Run a SQL statement against the analytics warehouse (SQLite dialect).",
                     {"query": "SQL to execute; several statements may be separated by semicolons."},
                     lambda ws, query: run_sql(ws, query)),
        "describe": b.use("describe_table", "Show the columns of a warehouse table or view.",
                          {"table": "Table name."}, lambda ws, table: describe_table(ws, table)),
        "tables": b.use("list_tables", "List the tables and views in the warehouse.",
                        {"schema": "Schema name (optional)."}, lambda ws, schema="": list_tables(ws, schema),
                        optional=("schema",)),
    }


def web_tools(b: HB) -> dict[str, Callable[..., Call]]:
    return {
        "search": b.use("search_web", "Web search. Returns up to four results with title, URL and snippet.",
                        {"query": "What to search for."}, lambda ws, query: search_web(ws, query)),
        "fetch": b.use("fetch_url", "Download a web page and return its text.", {"url": "Absolute URL."},
                       lambda ws, url: fetch_url(ws, url)),
        "note": b.use("save_note", "Save research notes to a markdown file.",
                      {"filename": "Note file name.", "markdown": "Note content."},
                      lambda ws, filename, markdown: f_write(ws, f"notes/{filename}", markdown)),
    }


def desk_tools(b: HB) -> dict[str, Callable[..., Call]]:
    return {
        "list": b.use("list_tickets", "List the tickets of a support queue.", {"queue": "Queue name."},
                      lambda ws, queue: list_tickets(ws, queue)),
        "get": b.use("get_ticket", "Open a support ticket with its full thread.", {"ticket_id": "Ticket id, e.g. T-1001."},
                     lambda ws, ticket_id: get_ticket(ws, ticket_id)),
        "reply": b.use("reply_to_ticket", "Post a public reply to the customer on a ticket.",
                       {"ticket_id": "Ticket id.", "message": "Reply text."},
                       lambda ws, ticket_id, message: reply_ticket(ws, ticket_id, message)),
        "kb": b.use("search_kb", "Search the help-center knowledge base.", {"terms": "Search terms."},
                    lambda ws, terms: search_kb(ws, terms)),
        "crm": b.use("crm_lookup", "Look up a customer account in the CRM by email.", {"email": "Customer email."},
                     lambda ws, email: crm_lookup(ws, email)),
    }


def k8s_tools(b: HB) -> dict[str, Callable[..., Call]]:
    return {
        "k": b.use("kubectl", "Run a read-mostly kubectl command against the production cluster.",
                   {"args": "Arguments after 'kubectl', e.g. 'get pods -n web'."}, lambda ws, args: kubectl(ws, args)),
    }


def code_tools(b: HB, runner: str = "checks") -> dict[str, Callable[..., Call]]:
    t = {
        "view": b.use("view_source", "Show a source file with its current content.", {"filename": "Repository-relative path."},
                      lambda ws, filename: f_read(ws, filename)),
        "patch": b.use("patch_file", "Replace one unique snippet in a file.",
                       {"filename": "File to change.", "search": "Exact snippet currently in the file.",
                        "replacement": "What to put in its place."},
                       lambda ws, filename, search, replacement: f_patch(ws, filename, search, replacement)),
    }
    if runner == "checks":
        t["test"] = b.use("run_checks", "Run the repository's checks (unit tests) and summarise red/green.",
                          {"scope": "Optional test file to limit the run to."},
                          lambda ws, scope="": run_checks(ws, scope), optional=("scope",))
    else:
        t["test"] = b.use("exec_command", "Execute a command line in the repository and return its output.",
                          {"cmdline": "The command to execute."}, lambda ws, cmdline: sh(ws, cmdline))
    return t


def doc_tools(b: HB) -> dict[str, Callable[..., Call]]:
    return {
        "read": b.use("read_doc", "Read a documentation page (markdown).", {"doc_path": "Path under the repo, e.g. docs/index.md."},
                      lambda ws, doc_path: f_read(ws, doc_path)),
        "write": b.use("write_doc", "Create or replace a documentation page.",
                       {"doc_path": "Path of the page.", "markdown": "Full page content."},
                       lambda ws, doc_path, markdown: f_write(ws, doc_path, markdown)),
        "replace": b.use("replace_in_doc", "Change one passage of a documentation page.",
                         {"doc_path": "Page.", "find": "Passage to change (must occur once).",
                          "replace_with": "New passage."},
                         lambda ws, doc_path, find, replace_with: f_patch(ws, doc_path, find, replace_with)),
        "build": b.use("build_docs", "Build the documentation site and report warnings such as broken links.",
                       {"strict": "Set to 'yes' to treat warnings as errors (optional)."},
                       lambda ws, strict="": build_docs(ws, strict), optional=("strict",)),
    }


# -- workspace content ------------------------------------------------------------------------------------------

DURATIONS_SRC = '''\
"""Parse and format durations such as "1h30m" or "45s"."""
import re

UNITS = {"h": {H}, "m": 60, "s": 1}


def parse_duration(text):
    total = 0
    for amount, unit in re.findall({RX}, text.strip().lower()):
        total += int(amount) * UNITS[unit]
    return total


def format_duration(seconds):
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"
'''
DURATIONS_RX = 'r"(\\d+)([hms])"'
DURATIONS_TESTS = '''\
from durations import format_duration, parse_duration


def test_seconds():
    assert parse_duration("90s") == 90


def test_minutes():
    assert parse_duration("45m") == 2700


def test_hours():
    assert parse_duration("2h") == 7200


def test_mixed():
    assert parse_duration("1h30m") == 5400


def test_format():
    assert format_duration(3725) == "1h2m5s"


def test_format_zero():
    assert format_duration(0) == "0s"
'''


def durations(h: str = "360", rx: str = DURATIONS_RX) -> str:
    return DURATIONS_SRC.replace("{H}", h).replace("{RX}", rx)


LEDGER_FIXED = {
    "balance": ("    return sum(e['amount'] for e in entries if e['kind'] == 'credit')",
                "    return sum(e['amount'] if e['kind'] == 'credit' else -e['amount'] for e in entries)"),
    "fmt": ("    return f\"{cents // 100}.{cents % 100:02d}\"", "    return f\"{cents // 100:,}.{cents % 100:02d}\""),
    "overdue": ("    return [i for i in invoices if i['due'] > today and not i['paid']]",
                "    return [i for i in invoices if i['due'] < today and not i['paid']]"),
}
LEDGER_SRC = '''\
"""Account ledger helpers."""


def balance(entries):
    """Credits minus debits, in cents."""
{balance}


def format_amount(cents):
    """12345678 -> '123,456.78'."""
{fmt}


def overdue(invoices, today):
    """Unpaid invoices whose due date (ISO string) is before ``today``."""
{overdue}
'''
LEDGER_TESTS = '''\
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from ledger import balance, format_amount, overdue  # noqa: E402

E = [{"kind": "credit", "amount": 5000}, {"kind": "debit", "amount": 1200}, {"kind": "credit", "amount": 300}]


class BalanceTest(unittest.TestCase):
    def test_mixed(self):
        self.assertEqual(balance(E), 4100)

    def test_only_debits(self):
        self.assertEqual(balance([{"kind": "debit", "amount": 700}]), -700)

    def test_empty(self):
        self.assertEqual(balance([]), 0)


class FormatTest(unittest.TestCase):
    def test_small(self):
        self.assertEqual(format_amount(505), "5.05")

    def test_thousands(self):
        self.assertEqual(format_amount(12345678), "123,456.78")


class OverdueTest(unittest.TestCase):
    def test_overdue(self):
        inv = [{"id": 1, "due": "2025-01-10", "paid": False}, {"id": 2, "due": "2025-03-01", "paid": False},
               {"id": 3, "due": "2025-01-05", "paid": True}]
        self.assertEqual([i["id"] for i in overdue(inv, "2025-02-01")], [1])

    def test_none_due(self):
        self.assertEqual(overdue([], "2025-02-01"), [])
'''


def ledger(bugs: tuple[str, ...]) -> str:
    return LEDGER_SRC.format(**{k: (bug if k in bugs else fix) for k, (bug, fix) in LEDGER_FIXED.items()})


def code_files(**extra: str) -> dict[str, Any]:
    return {"modules": [], "files": dict(extra)}


WAREHOUSE = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT, signup_date TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, order_date TEXT, status TEXT, amount_cents INTEGER);
CREATE TABLE order_items (order_id INTEGER, sku TEXT, qty INTEGER, unit_cents INTEGER);
CREATE TABLE refunds (id INTEGER PRIMARY KEY, order_id INTEGER, refunded_cents INTEGER, reason TEXT);
""" + "".join(
    f"INSERT INTO customers VALUES ({c}, 'Customer {c}', '{['DE', 'FR', 'NL', 'PL', 'SE'][c % 5]}', "
    f"'2024-0{1 + c % 9}-1{c % 10}');\n" for c in range(1, 41)) + "".join(
    f"INSERT INTO orders VALUES ({o}, {1 + o % 40}, '2025-03-{1 + o % 28:02d}', "
    f"'{['paid', 'paid', 'paid', 'cancelled', 'paid', 'refunded'][o % 6]}', {1500 + (o * 733) % 9000});\n"
    for o in range(1, 121)) + "".join(
    f"INSERT INTO order_items VALUES ({1 + k % 120}, 'SKU-{100 + k % 17}', {1 + k % 3}, {500 + (k * 97) % 2500});\n"
    for k in range(200)) + "".join(
    f"INSERT INTO refunds VALUES ({r}, {6 * r}, {900 + r * 11}, '{['damaged', 'late', 'wrong size'][r % 3]}');\n"
    for r in range(1, 21))

EXTRA_TABLES = ["sessions", "pageviews", "carts", "coupons", "shipments", "warehouses", "suppliers", "returns_log",
                "stock_levels", "price_history", "reviews", "newsletter", "support_calls", "ad_spend"]


def warehouse_sql(extra: int = 0) -> str:
    out = WAREHOUSE
    for k, t in enumerate(EXTRA_TABLES[:extra]):
        out += f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, ref TEXT, value INTEGER, noted_at TEXT);\n"
        out += "".join(f"INSERT INTO {t} VALUES ({r}, '{t[:3]}-{r}', {(r * (k + 3)) % 50 if r % (k + 4) else 'NULL'}, "
                       f"'2025-02-{1 + r % 27:02d}');\n" for r in range(1, 6 + k))
    return out


CATALOG = [
    {"name": "orders", "about": "one row per checkout; amount_cents is the order total, status paid cancelled or refunded"},
    {"name": "order_items", "about": "line items of each order with sku quantity and unit price in cents"},
    {"name": "customers", "about": "registered customers with country and signup date"},
    {"name": "refunds", "about": "refunds issued against orders with refunded amount and reason"},
    {"name": "daily_revenue", "about": "view: paid revenue per calendar day, net of refunds"},
    {"name": "marketing.ad_spend", "about": "daily advertising spend per channel, loaded from the ads export"},
]


def desk(tickets: dict[str, tuple[str, str, str, str]], kb: Sequence[tuple[str, str, str]] = (),
         customers: dict[str, dict[str, Any]] | None = None) -> str:
    return json.dumps({
        "tickets": {tid: {"queue": q, "customer": c, "subject": s, "body": body, "status": "open"}
                    for tid, (q, c, s, body) in tickets.items()},
        "kb": [{"id": i, "title": t, "text": x} for i, t, x in kb],
        "customers": customers or {}})


KB = [
    ("KB-101", "Resetting two-factor authentication", ("An admin can reset 2FA for a member from Settings > Members. "
     "The member sets up a new authenticator on next login.")),
    ("KB-102", "Changing the billing email", ("Owners change the billing contact under Billing > Contacts; invoices "
     "go to the new address from the next cycle.")),
    ("KB-103", "Exporting project data", ("Use Project > Export to download a ZIP of all boards as CSV; large "
     "exports are emailed when ready.")),
    ("KB-104", "Seat limits on the Team plan", ("The Team plan includes 25 seats; extra seats are billed pro rata "
     "per month.")),
    ("KB-105", "Deleting an account", ("Account deletion is permanent after 30 days; contact support to cancel a "
     "pending deletion.")),
    ("KB-106", "SSO with Google Workspace", ("Enable Google sign-in under Security; enforcing it logs out members "
     "who use passwords.")),
    ("KB-107", "Mobile app offline mode", ("Boards opened once stay available offline; changes sync when the "
     "device reconnects.")),
    ("KB-108", "Webhook delivery failures", ("Webhooks retry for 12 hours with backoff; disable a failing "
     "endpoint under Integrations > Webhooks.")),
]


def tickets(n: int, queue: str, offset: int = 0) -> dict[str, tuple[str, str, str, str]]:
    subjects = [("Can't log in after changing phone", "I replaced my phone and the authenticator codes no longer work."),
                ("Invoice sent to old address", "Our invoices still go to our former finance manager."),
                ("Export stuck at 90%", "The project export has shown 90% for two hours."),
                ("Need 5 more seats", "We are at 25 members and need to invite five contractors."),
                ("Please cancel account deletion", "I clicked delete by mistake yesterday, please undo it."),
                ("Google login option missing", "Our team wants to sign in with Google accounts."),
                ("App shows old data on the train", "The mobile app shows yesterday's board when offline."),
                ("Webhook keeps failing", "Our endpoint was down for a day; are events lost?"),
                ("Wrong VAT on invoice", "The March invoice charged 21% VAT but we are in Germany."),
                ("Dark mode request", "Would love a dark theme in the desktop app."),
                ("Board permissions confusing", "Guests can see boards they were not invited to?"),
                ("Duplicate charge", "We were charged twice for April."),
                ("Slow search", "Search takes 10 seconds on our biggest workspace."),
                ("API token expired", "Our integration stopped with 401 this morning.")]
    out = {}
    for k in range(n):
        s, body = subjects[(k + offset) % len(subjects)]
        out[f"T-{2040 + k + offset}"] = (queue, f"user{k + offset}@{['acme.io', 'globex.com', 'initech.net'][k % 3]}",
                                        s, body)
    return out


def web(pages: dict[str, tuple[str, str]], flaky: dict[str, tuple[int, str]] | None = None) -> str:
    flaky = flaky or {}
    return json.dumps({u: {"title": t, "body": x, **({"fail": flaky[u][0], "error": flaky[u][1]} if u in flaky else {})}
                       for u, (t, x) in pages.items()})


PAGES = {
    "https://nimbusmq.dev/docs/limits": ("Nimbus MQ limits", ("A message body may be at most 256 KiB. Batches hold up to "
                                         "100 messages. Queues retain messages for 14 days.")),
    "https://nimbusmq.dev/docs/delivery": ("Nimbus MQ delivery semantics", ("Delivery is at least once; consumers "
                                           "acknowledge within the visibility timeout of 30 seconds.")),
    "https://blog.streamline.io/kafka-vs-nimbus": ("Kafka vs Nimbus MQ for small teams", ("Kafka offers partitions and "
                                                   "replay; Nimbus MQ is a managed queue with lower operational load.")),
    "https://ravenstream.org/docs/retention": ("Ravenstream retention", ("Ravenstream keeps log segments for 7 days "
                                               "by default; tiered storage moves old segments to object storage.")),
    "https://ravenstream.org/docs/throughput": ("Ravenstream throughput benchmarks", ("A three node Ravenstream "
                                                "cluster sustained 1.2 GB/s writes with replication factor 3.")),
    "https://queuebench.net/results-2025": ("Queue benchmark results 2025", ("Latency p99: Nimbus MQ 38 ms, "
                                            "Ravenstream 12 ms, Kafka 15 ms under the same load.")),
    "https://pricing.nimbusmq.dev": ("Nimbus MQ pricing", ("USD 0.40 per million requests; the first million "
                                     "requests each month are free.")),
    "https://ravenstream.org/pricing": ("Ravenstream cloud pricing", ("Ravenstream cloud costs USD 0.11 per GB "
                                        "written plus storage at USD 0.02 per GB month.")),
    "https://forum.pyutils.org/t/wheel-builds": ("Wheel builds for pyfastjson", ("pyfastjson publishes wheels for "
                                                 "x86_64 Linux and macOS; Windows wheels arrived in 3.2.")),
    "https://pyfastjson.readthedocs.io/install": ("Installing pyfastjson", ("pip install pyfastjson. Building from "
                                                  "source needs a C compiler and Python headers.")),
}


# -- 1. repeat -------------------------------------------------------------------------------------------------


def repeat_loop_web(b: HB) -> tuple[str, str]:
    w = web_tools(b)
    b.options = {"modules": [], "files": {f"{STATE}/web.json": web(PAGES)}}
    b.turn(w["search"](hits(1), query="nimbus mq message limits"), text="Searching for the queue limits.")
    url = "https://nimbusmq.dev/docs/limits"
    for k in range(11):
        b.turn(w["fetch"](contains("256 KiB"), url=url), text="Opening the limits page." if k == 0 else
               ["Let me re-read the limits page to be sure.", "Reading the page again.", "Double-checking the limit."][k % 3],
               loop_start=k == 0)
    b.final("The limits page is the only source I found; I could not confirm it.")
    return "downloads the same documentation page 11 times after one search", \
        "What is the largest message Nimbus MQ accepts? Cite the docs."


def repeat_loop_k8s(b: HB) -> tuple[str, str]:
    k = k8s_tools(b)["k"]
    b.options = {"modules": [], "files": {f"{STATE}/cluster.json": CLUSTER}}
    b.turn(k(contains("ledger-api"), args="get deployments -n payments"), text="Looking at the payments deployments.")
    for n in range(10):
        b.turn(k(contains("CrashLoopBackOff"), args="get pods -n payments"),
               text="Listing the pods." if n == 0 else "Checking the pods again.", loop_start=n == 0)
    b.final("ledger-api keeps restarting; I could not find out why.")
    return "lists the same namespace's pods 10 times with the same output", \
        "The payments team says ledger-api is flapping. Find the cause."


def repeat_healthy_desk(b: HB) -> tuple[str, str]:
    d = desk_tools(b)
    note = b.use("write_summary", "Write a shift summary file for the next support agent.",
                 {"title": "Summary title.", "text": "Summary body."},
                 lambda ws, title, text: f_write(ws, f"handover/{title}.md", text))
    tk = tickets(11, "billing")
    b.options = {"modules": [], "files": {f"{STATE}/helpdesk.json": desk(tk, KB)}}
    b.turn(d["list"](hits(11), queue="billing"), text="Listing the billing queue.")
    for tid in tk:
        b.turn(d["get"](contains(tid), ticket_id=tid), text=f"Opening {tid}.")
    summary = "\n".join(f"- {tid}: {s}" for tid, (_, _, s, _) in tk.items())
    b.turn(note(OK, title="billing-queue", text=summary), text="Writing the handover.")
    b.final(f"Reviewed {len(tk)} billing tickets and wrote handover/billing-queue.md.")
    return f"opens {len(tk)} different tickets once each, then writes a handover", \
        "Go through the billing queue and write a handover summary for the next shift."


# -- 2. search -------------------------------------------------------------------------------------------------


def search_loop_kb(b: HB) -> tuple[str, str]:
    d = desk_tools(b)
    b.options = {"modules": [], "files": {f"{STATE}/helpdesk.json": desk(
        {"T-3301": ("general", "lena@acme.io", "Move license", "How do I move my license to our new workspace?")}, KB)}}
    b.turn(d["get"](contains("license"), ticket_id="T-3301"), text="Reading the ticket.")
    b.turn(d["kb"](hits(1), terms="seats team plan"), text="Checking seat rules first.")
    wordings = ["transfer license to another workspace", "move license between workspaces", "license migration new workspace",
                "reassign license workspace", "workspace license transfer", "change workspace of a license",
                "licence transfer", "move subscription license to new org", "license portability workspaces",
                "migrate paid license workspace", "license move"]
    for k, q in enumerate(wordings):
        b.turn(d["kb"](EMPTY, terms=q), text="Searching the help center." if k == 0 else "Trying other words.",
               loop_start=k == 0)
    b.final("I could not find an article on moving a license.")
    return f"{len(wordings)} reworded help-center searches for a topic it has no article on, after 2 useful calls", \
        "Answer ticket T-3301."


def search_healthy_web(b: HB) -> tuple[str, str]:
    w = web_tools(b)
    b.options = {"modules": [], "files": {f"{STATE}/web.json": web(PAGES)}}
    b.turn(w["search"](EMPTY, query="redpanda tiered storage cost calculator"), text="Starting with storage costs.")
    for q in ["ravenstream retention tiered storage", "nimbus mq pricing million requests", "ravenstream cloud pricing",
              "queue latency benchmark p99", "nimbus mq delivery semantics", "ravenstream throughput replication"]:
        b.turn(w["search"](hits(1), query=q), text=f"Searching: {q}.")
    b.turn(w["fetch"](contains("p99"), url="https://queuebench.net/results-2025"), text="Reading the benchmark.")
    b.turn(w["note"](OK, filename="brokers.md", markdown="Nimbus MQ: managed, $0.40/M requests, p99 38 ms.\n"
                     "Ravenstream: 7-day retention + tiered storage, $0.11/GB written, p99 12 ms."), text="Saving notes.")
    b.final("Nimbus MQ is cheaper to run at low volume; Ravenstream wins on latency and replay. Notes in brokers.md.")
    return "one empty search, then six searches on different sub-topics that all hit, a fetch and notes", \
        "Compare Nimbus MQ and Ravenstream on cost, retention and latency for our team."


def search_healthy_catalog(b: HB) -> tuple[str, str]:
    s = sql_tools(b)
    cat = b.use("search_catalog", "Search the data catalog for datasets by keywords.", {"keywords": "Keywords."},
                lambda ws, keywords: search_catalog(ws, keywords))
    b.options = {"modules": [], "files": {f"{STATE}/warehouse.sql": warehouse_sql(), f"{STATE}/catalog.json": json.dumps(CATALOG)}}
    for q in ["refund reason", "order total", "customer country", "line items sku", "advertising spend channel"]:
        b.turn(cat(hits(1), keywords=q), text=f"Looking for {q}.")
    b.turn(s["describe"](contains("refunded_cents"), table="refunds"), text="Checking the refunds columns.")
    b.final("Sources: orders.amount_cents, refunds.refunded_cents/reason, customers.country, order_items, "
            "marketing.ad_spend.")
    return "five catalog searches for different datasets, each finds one, then a table description", \
        "Which datasets do I need for a refund-rate-by-country dashboard with ad spend?"


# -- 3. test_fix -----------------------------------------------------------------------------------------------


def test_fix_loop_checks(b: HB) -> tuple[str, str]:
    c = code_tools(b, "checks")
    b.options = code_files(**{"src/durations.py": durations(), "tests/test_durations.py": DURATIONS_TESTS})
    b.turn(c["test"](failing(2)), text="Running the checks.")
    rxs = [DURATIONS_RX, 'r"(\\d+)\\s*([hms])"', 'r"([0-9]+)([hms])"', 'r"(\\d+)(h|m|s)"', 'r"(\\d+)\\s*(h|m|s)\\b"',
           'r"(\\d+) ?([hms])"']
    for k in range(5):
        b.turn(c["view"](contains("re.findall"), filename="src/durations.py"),
               text="Looking at the parser." if k == 0 else "The hour cases still fail; looking again.", loop_start=k == 0)
        b.turn(c["patch"](OK, filename="src/durations.py", search=rxs[k], replacement=rxs[k + 1]),
               text="Adjusting the regular expression.")
        b.turn(c["test"](failing(2)), text="Re-running the checks.")
    b.final("test_hours and test_mixed still fail; the pattern seems right but the values are off.")
    return "view → a different regex tweak → checks, 5 times, the same 2 checks red (the bug is elsewhere)", \
        "parse_duration gives wrong results for hours. Fix it."


DOCS_SITE = {
    "docs/index.md": "# Lumen CLI\n\nStart with [installation](installation.md) and the [usage guide](guide/usage.md).\n",
    "docs/installation.md": "# Installation\n\n`pipx install lumen-cli`. Then read [usage](guide/usage.md).\n",
    "docs/guide/usage.md": "# Usage\n\nRun `lumen scan PATH`. Setup steps are in [setup](setup.md).\n\n"
                           "See also [configuration](config.md).\n",
    "docs/guide/config.md": "# Configuration\n\nLumen reads `lumen.toml`. Back to [usage](usage.md).\n",
}


def test_fix_loop_docs(b: HB) -> tuple[str, str]:
    d = doc_tools(b)
    b.options = {"modules": [], "files": DOCS_SITE}
    b.turn(d["build"](failing(1)), text="Building the site.")
    targets = ["setup.md", "./setup.md", "../setup.md", "guide/setup.md", "Setup.md"]
    for k in range(4):
        b.turn(d["read"](contains("Setup steps"), doc_path="docs/guide/usage.md"),
               text="Reading the usage page." if k == 0 else "Still broken; reading the page again.", loop_start=k == 0)
        b.turn(d["replace"](OK, doc_path="docs/guide/usage.md", find=f"[setup]({targets[k]})",
                            replace_with=f"[setup]({targets[k + 1]})"), text="Fixing the link path.")
        b.turn(d["build"](failing(1)), text="Rebuilding.")
    b.final("The setup link is still reported broken.")
    return "read → a different wrong link target → build, 4 times, the same broken-link warning", \
        "The docs build warns about a broken link. Fix it so the build is clean."


def test_fix_healthy_unittest(b: HB) -> tuple[str, str]:
    c = code_tools(b, "shell")
    b.options = code_files(**{"src/ledger.py": ledger(("balance", "fmt", "overdue")), "tests/test_ledger.py": LEDGER_TESTS})
    cmd = "python -m unittest discover -s tests"
    b.turn(c["test"](contains("FAILED (failures=4)"), cmdline=cmd), text="Running the unit tests.")
    left = ["FAILED (failures=2)", "FAILED (failures=1)", "\nOK"]
    for k, bug in enumerate(("balance", "fmt", "overdue")):
        bad, good = LEDGER_FIXED[bug]
        b.turn(c["view"](contains(bad.strip()), filename="src/ledger.py"), text=f"Reading {bug}.")
        b.turn(c["patch"](OK, filename="src/ledger.py", search=bad, replacement=good), text=f"Fixing {bug}.")
        b.turn(c["test"](contains(left[k]), cmdline=cmd), text="Running them again.")
    b.final("All ledger tests pass: fixed balance (debits), thousands separators and the overdue comparison.")
    return "3 bugs fixed one by one with unittest, failures 4 → 2 → 1 → OK", "Get the ledger unit tests green."


# -- 4. edits --------------------------------------------------------------------------------------------------

MANIFEST = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: storefront\nspec:\n  replicas: {R}\n" \
           "  template:\n    spec:\n      containers:\n        - name: web\n          image: shop/storefront:2.4.1\n"


def edits_loop_manifest(b: HB) -> tuple[str, str]:
    k = k8s_tools(b)["k"]
    wr = b.use("write_manifest", "Write a Kubernetes manifest file.", {"path": "Manifest path.", "yaml": "Full YAML."},
               lambda ws, path, yaml: f_write(ws, path, yaml))
    rd = b.use("read_manifest", "Read a manifest file.", {"path": "Manifest path."}, lambda ws, path: f_read(ws, path))
    b.options = {"modules": [], "files": {"deploy/storefront.yaml": MANIFEST.replace("{R}", "3"),
                                          f"{STATE}/cluster.json": CLUSTER}}
    b.turn(rd(contains("replicas: 3"), path="deploy/storefront.yaml"), text="Reading the manifest.")
    for n in range(5):
        for r, txt in (("4", "Scaling to 4 replicas for the sale."), ("3", "Going back to 3 to stay within quota.")):
            b.turn(wr(OK, path="deploy/storefront.yaml", yaml=MANIFEST.replace("{R}", r)), text=txt,
                   loop_start=n == 0 and r == "4")
            b.turn(k(contains("configured"), args="apply -f deploy/storefront.yaml"), text="Applying.")
    b.final("I have not settled on a replica count.")
    return "rewrites a manifest between 4 and 3 replicas and applies it, 5 round trips", \
        "Scale the storefront for the weekend sale without exceeding the namespace quota."


VIEWS = ["checkout", "catalog", "profile", "search", "wishlist", "orders", "blog", "careers", "support", "press", "legal"]


def edits_healthy_imports(b: HB) -> tuple[str, str]:
    c = code_tools(b, "checks")
    files = {f"src/views/{v}.py": f"from legacy_helpers import slugify\n\n\ndef url_for_{v}(title):\n"
                                  f"    return '/{v}/' + slugify(title)\n" for v in VIEWS}
    helper = "import re\n\n\ndef slugify(text):\n    return re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')\n"
    files.update({"src/legacy_helpers.py": helper, "src/textkit.py": helper, "src/views/__init__.py": "",
                  "tests/test_views.py": "import importlib\n\nimport pytest\n\nVIEWS = " + repr(VIEWS) + "\n\n\n"
                  "@pytest.mark.parametrize('v', VIEWS)\ndef test_url(v):\n    m = importlib.import_module(f'views.{v}')\n"
                  "    assert getattr(m, f'url_for_{v}')('Hello World') == f'/{v}/hello-world'\n"})
    b.options = code_files(**files)
    for v in VIEWS:
        b.turn(c["patch"](OK, filename=f"src/views/{v}.py", search="from legacy_helpers import slugify",
                          replacement="from textkit import slugify"), text=f"Updating views/{v}.py.")
    b.turn(c["test"](failing(0)), text="Running the checks.")
    b.final(f"All {len(VIEWS)} views now import slugify from textkit; checks are green.")
    return f"the same import change in {len(VIEWS)} different files, then the checks", \
        "Move every view off legacy_helpers onto textkit."


ENDPOINTS = ["users", "teams", "projects", "boards", "cards", "comments", "labels", "webhooks", "tokens", "audit-log"]


def edits_healthy_docs(b: HB) -> tuple[str, str]:
    d = doc_tools(b)
    b.options = {"modules": [], "files": {"docs/api/index.md": "# API reference\n\n" + "".join(
        f"- [{e}]({e}.md)\n" for e in ENDPOINTS)}}
    for e in ENDPOINTS:
        b.turn(d["write"](OK, doc_path=f"docs/api/{e}.md", markdown=f"# /{e}\n\nList, create and delete {e}.\n\n"
                          f"- `GET /v2/{e}`\n- `POST /v2/{e}`\n- `DELETE /v2/{e}/{{id}}`\n\n"
                          "Back to the [index](index.md).\n"), text=f"Writing the {e} page.")
    b.turn(d["build"](failing(0)), text="Building the site.")
    b.final(f"Wrote {len(ENDPOINTS)} endpoint pages; the site builds without warnings.")
    return f"writes {len(ENDPOINTS)} different templated API pages, then builds the site", \
        "Write a reference page for each v2 endpoint listed in docs/api/index.md."


# -- 5. alternating ---------------------------------------------------------------------------------------------


def alternating_loop_k8s(b: HB) -> tuple[str, str]:
    k = k8s_tools(b)["k"]
    b.options = {"modules": [], "files": {f"{STATE}/cluster.json": CLUSTER}}
    for n in range(6):
        b.turn(k(contains("search-api-6c8f"), args="get pods -n search"),
               text="Checking the pods." if n == 0 else "Let me look at the pods once more.", loop_start=n == 0)
        b.turn(k(contains("connection refused"), args="logs search-api-6c8f9-xk2lp -n search"),
               text="And the logs.")
    b.final("search-api cannot reach its index; I don't know why.")
    return "pod list and the same pod's logs alternating 6 times, both unchanged", \
        "search-api returns 500s. Investigate."


def alternating_loop_sql(b: HB) -> tuple[str, str]:
    s = sql_tools(b)
    b.options = {"modules": [], "files": {f"{STATE}/warehouse.sql": warehouse_sql()}}
    b.turn(s["tables"](hits(3)), text="Listing the tables.")
    q = "SELECT order_date, SUM(total) FROM orders WHERE status = 'paid' GROUP BY order_date"
    for n in range(5):
        b.turn(s["describe"](contains("amount_cents"), table="orders"),
               text="Checking the orders columns." if n == 0 else "Looking at the columns again.", loop_start=n == 0)
        b.turn(s["sql"](error("no such column: total"), query=q), text="Running the revenue query.")
    b.final("The revenue query keeps failing.")
    return "table description and the same failing query alternating 5 times", "Daily paid revenue for March, please."


def alternating_healthy_desk(b: HB) -> tuple[str, str]:
    d = desk_tools(b)
    tk = tickets(7, "onboarding", 3)
    b.options = {"modules": [], "files": {f"{STATE}/helpdesk.json": desk(tk, KB)}}
    for tid, (_, cust, subj, _) in tk.items():
        b.turn(d["get"](contains(subj), ticket_id=tid), text=f"Reading {tid}.")
        b.turn(d["reply"](contains("pending-customer"), ticket_id=tid,
                          message=f"Hi {cust.split('@')[0]}, thanks for reaching out about \"{subj}\". "
                                  "Here is what to do next; reply if anything is unclear."), text="Replying.")
    b.final(f"Answered all {len(tk)} onboarding tickets.")
    return f"ticket read and reply alternating over {len(tk)} different tickets", "Work through the onboarding queue."


# -- 6. multi_agent ---------------------------------------------------------------------------------------------


def multi_agent_loop_sql(b: HB) -> tuple[str, str]:
    s = sql_tools(b)
    b.options = {"modules": [], "files": {f"{STATE}/warehouse.sql": warehouse_sql()}}
    b.agent = "analyst"
    b.agents = {"analyst": "You are the analyst. Build the reporting view, then hand it to the validator.",
                "validator": "You are the validator. Check the view against the source tables; send it back if it "
                             "does not reconcile."}
    view = ("DROP VIEW IF EXISTS daily_revenue; CREATE VIEW daily_revenue AS SELECT order_date, SUM(amount_cents) "
            "AS cents FROM orders GROUP BY order_date")
    check = ("SELECT (SELECT SUM(cents) FROM daily_revenue) AS view_total, "
             "(SELECT SUM(amount_cents) FROM orders WHERE status = 'paid') AS paid_total")
    b.turn(s["describe"](contains("status"), table="orders"), text="Looking at orders.")
    b.handoff("validator", "Before I build it: what do the paid orders total in the source table?")
    b.turn(s["sql"](hits(1), query="SELECT SUM(amount_cents) AS paid_total FROM orders WHERE status = 'paid'"),
           text="Totalling paid orders.", agent="validator")
    b.handoff("analyst", "Paid orders total is the reference; build the view to match it.", agent="validator")
    for n in range(5):
        b.turn(s["sql"](contains("statement ok"), query=view), text="Creating the view.", loop_start=n == 0)
        b.handoff("validator", "daily_revenue is ready for validation.")
        b.turn(s["sql"](hits(1), query=check), text="Reconciling totals.", agent="validator")
        b.handoff("analyst", "view_total does not match paid_total; please fix the view.", agent="validator")
    b.final("We could not reconcile the view.")
    return "validator totals the source; then analyst recreates the same view, validator finds the same mismatch, 5 round trips", \
        "Build a daily_revenue view of paid orders and get it validated."


def _docs_with_broken(n: int) -> dict[str, str]:
    pages = {"docs/index.md": "# Atlas SDK\n\n" + "".join(f"- [{p}]({p}.md)\n" for p in ["auth", "events", "errors", "retries"]),
             "docs/auth.md": "# Auth\n\nSee [errors](errors.md).\n", "docs/events.md": "# Events\n\nSee [retries](retries.md).\n",
             "docs/errors.md": "# Errors\n\nSee [events](events.md).\n", "docs/retries.md": "# Retries\n\nSee [auth](auth.md).\n"}
    broken = [("docs/auth.md", "errors.md", "error-codes.md"), ("docs/events.md", "retries.md", "retry.md"),
              ("docs/errors.md", "events.md", "event.md")][:n]
    for path, good, bad in broken:
        pages[path] = pages[path].replace(f"({good})", f"({bad})")
    return pages


def multi_agent_healthy_docs(b: HB) -> tuple[str, str]:
    d = doc_tools(b)
    b.options = {"modules": [], "files": _docs_with_broken(3)}
    b.agent = "writer"
    b.agents = {"writer": "You are the technical writer. Fix one page at a time and ask the editor to build.",
                "editor": "You are the editor. Build the site and tell the writer what is still broken."}
    fixes = [("docs/auth.md", "error-codes.md", "errors.md"), ("docs/events.md", "retry.md", "retries.md"),
             ("docs/errors.md", "event.md", "events.md")]
    left = 3
    for page, bad, good in fixes:
        b.turn(d["read"](contains(bad), doc_path=page), text=f"Reading {page}.")
        b.turn(d["replace"](OK, doc_path=page, find=f"({bad})", replace_with=f"({good})"), text="Fixing the link.")
        b.handoff("editor", f"Fixed the link in {page}; please build.")
        left -= 1
        b.turn(d["build"](failing(left)), text="Building.", agent="editor")
        if left:
            b.handoff("writer", f"{left} broken link(s) left.", agent="editor")
    b.final("The site builds cleanly.", agent="editor")
    return "writer fixes a link per round, editor builds: broken links 3 → 0 over three handoffs", \
        "Clean up the Atlas SDK docs so the build has no warnings."


def multi_agent_healthy_checks(b: HB) -> tuple[str, str]:
    c = code_tools(b, "checks")
    b.options = code_files(**{"src/ledger.py": ledger(("balance", "fmt", "overdue")), "tests/test_ledger.py": LEDGER_TESTS})
    b.agent = "implementer"
    b.agents = {"implementer": "You are the implementer. Fix one function, then ask the reviewer to run the checks.",
                "reviewer": "You are the reviewer. Run the checks and report what is left."}
    left = 4
    drop = {"balance": 2, "fmt": 1, "overdue": 1}
    for bug in ("overdue", "balance", "fmt"):
        bad, good = LEDGER_FIXED[bug]
        b.turn(c["view"](contains(bad.strip()), filename="src/ledger.py"), text=f"Reading {bug}.")
        b.turn(c["patch"](OK, filename="src/ledger.py", search=bad, replacement=good), text=f"Fixing {bug}.")
        b.handoff("reviewer", f"{bug} fixed, please run the checks.")
        left -= drop[bug]
        b.turn(c["test"](failing(left)), text="Running the checks.", agent="reviewer")
        if left:
            b.handoff("implementer", f"{left} red left.", agent="reviewer")
    b.final("Checks all green; approved.", agent="reviewer")
    return "implementer fixes a function per round, reviewer runs the checks: red 4 → 3 → 1 → 0", \
        "Fix the ledger module; the reviewer approves when the checks are green."


# -- 7. polling -------------------------------------------------------------------------------------------------


def pipelines(runs: dict[str, tuple[str, list[str]]]) -> str:
    return json.dumps({r: {"dag": dag, "schedule": sched, "polls": 0,
                           "steps": {"running": "step 3/7: load_orders"}} for r, (dag, sched) in runs.items()})


def polling_loop_pipeline(b: HB) -> tuple[str, str]:
    trig = b.use("trigger_pipeline", "Start a data pipeline (DAG) run.", {"dag": "DAG id."},
                 lambda ws, dag: trigger_pipeline(ws, dag))
    st = b.use("pipeline_status", "Get the state of a pipeline run.", {"run_id": "Run id."},
               lambda ws, run_id: pipeline_status(ws, run_id))
    b.options = {"modules": [], "files": {f"{STATE}/pipelines.json": pipelines({"r-20250314-01": ("nightly_orders", ["running"])})}}
    b.turn(trig(contains("r-20250314-01"), dag="nightly_orders"), text="Starting the nightly load.")
    for n in range(12):
        b.turn(st(status("running"), run_id="r-20250314-01"), text="Checking the run." if n == 0 else "Waiting on it.",
               loop_start=n == 0)
    b.final("The run is still at load_orders.")
    return "triggers a pipeline, then polls it 12 times: running, stuck on the same step", \
        "Rerun nightly_orders and tell me when the data is fresh."


ROLL = "Waiting for deployment \"checkout\" rollout to finish: {a} of 3 updated replicas are available..."


def polling_loop_rollout(b: HB) -> tuple[str, str]:
    k = k8s_tools(b)["k"]
    b.options = {"modules": [], "files": {f"{STATE}/cluster.json": CLUSTER}}
    b.turn(k(contains("deployment.apps/checkout restarted"), args="rollout restart deployment/checkout -n shop"),
           text="Restarting checkout.")
    for n in range(10):
        b.turn(k(status(ROLL.format(a=1)), args="rollout status deployment/checkout -n shop"),
               text="Watching the rollout." if n == 0 else "Still rolling.", loop_start=n == 0)
    b.final("The rollout has not finished.")
    return "restarts a deployment, then polls its rollout 10 times at 1 of 3 replicas", \
        "Restart checkout to pick up the new secret and confirm it is healthy."


def polling_healthy_rollout(b: HB) -> tuple[str, str]:
    k = k8s_tools(b)["k"]
    b.options = {"modules": [], "files": {f"{STATE}/cluster.json": CLUSTER}}
    b.turn(k(contains("restarted"), args="rollout restart deployment/cart -n shop"), text="Restarting cart.")
    sched = CLUSTER_DATA["rollouts"]["shop/deployment/cart"]["schedule"]
    for n, line in enumerate(sched):
        b.turn(k(status(line), args="rollout status deployment/cart -n shop"),
               text="Watching the rollout." if n == 0 else "Checking again.")
    b.final("cart rolled out: 3 of 3 replicas updated and available.")
    return f"restarts a deployment and polls its rollout {len(sched)} times until it completes", \
        "Restart cart and confirm the rollout finished."


# -- 8. long_run ------------------------------------------------------------------------------------------------


def long_loop_web(b: HB) -> tuple[str, str]:
    w = web_tools(b)
    pages = dict(PAGES)
    pages["https://wiki.internal/queues"] = ("Queue choice at Fernhill", ("We evaluated brokers in 2023; the full "
                                             "comparison lives at https://wiki.internal/queues/2023-eval (moved)."))
    b.options = {"modules": [], "files": {f"{STATE}/web.json": web(pages)}}
    plan = [("search", "nimbus mq limits message", "limits"), ("fetch", "https://nimbusmq.dev/docs/limits", "256 KiB"),
            ("search", "ravenstream retention", "retention"), ("fetch", "https://ravenstream.org/docs/retention", "7 days"),
            ("search", "queue benchmark results latency", "Latency"), ("fetch", "https://queuebench.net/results-2025", "p99"),
            ("fetch", "https://pricing.nimbusmq.dev", "0.40"), ("fetch", "https://ravenstream.org/pricing", "0.11"),
            ("note", "draft.md", ""), ("fetch", "https://blog.streamline.io/kafka-vs-nimbus", "replay")]
    for kind, arg, want in plan:
        if kind == "search":
            b.turn(w["search"](hits(1), query=arg), text=f"Searching {arg}.")
        elif kind == "fetch":
            b.turn(w["fetch"](contains(want), url=arg), text="Reading it.")
        else:
            b.turn(w["note"](OK, filename=arg, markdown="Limits, retention, latency and prices collected."),
                   text="Drafting.")
    for n in range(5):
        b.turn(w["search"](contains("2023-eval"), query="fernhill queue choice"),
               text="Looking for our earlier evaluation." if n == 0 else "Searching for the evaluation again.",
               loop_start=n == 0)
        b.turn(w["fetch"](error("404"), url="https://wiki.internal/queues/2023-eval"), text="Opening it.")
    b.final("I could not open our earlier evaluation.")
    return "10 productive research calls, then the same search and the same dead link, 5 times", \
        "Write up queue options for Fernhill, including what we concluded in our own 2023 evaluation."


def long_healthy_desk(b: HB) -> tuple[str, str]:
    d = desk_tools(b)
    tk = tickets(13, "triage")
    b.options = {"modules": [], "files": {f"{STATE}/helpdesk.json": desk(tk, KB)}}
    kbq = ["reset two-factor", "billing email", "export project", "seats team plan", "account deletion",
           "google sso", "offline mobile", "webhook retry", "billing email invoice", "seat", "member",
           "export csv", "webhook endpoint"]
    b.turn(d["list"](hits(13), queue="triage"), text="Pulling the triage queue.")
    for k, (tid, (_, _cust, subj, _)) in enumerate(tk.items()):
        b.turn(d["get"](contains(subj), ticket_id=tid), text=f"Reading {tid}.")
        b.turn(d["kb"](hits(1), terms=kbq[k]), text="Finding the right article.")
        b.turn(d["reply"](OK, ticket_id=tid, message=f"Thanks for writing in about \"{subj}\". "
                          f"This article should help: search '{kbq[k]}' in the help center."), text="Answering.")
    b.final("Triaged and answered 13 tickets, each with a help-center article.")
    return "triages 13 tickets: read, knowledge-base search, reply for each (40 calls)", \
        "Clear the triage queue: answer each ticket with the relevant help article."


def long_healthy_sql(b: HB) -> tuple[str, str]:
    s = sql_tools(b)
    d = doc_tools(b)
    b.options = {"modules": [], "files": {f"{STATE}/warehouse.sql": warehouse_sql(14)}}
    for t in EXTRA_TABLES:
        b.turn(s["describe"](contains("noted_at"), table=t), text=f"Describing {t}.")
        b.turn(s["sql"](hits(1), query=f"SELECT COUNT(*) AS n, SUM(value IS NULL) AS null_values FROM {t}"),
               text="Profiling it.")
        b.turn(s["sql"](hits(1), query=f"SELECT MIN(noted_at), MAX(noted_at) FROM {t}"), text="Date range.")
    b.turn(d["write"](OK, doc_path="docs/data-dictionary.md",
                      markdown="# Data dictionary\n\n" + "".join(f"- {t}: id, ref, value, noted_at\n" for t in EXTRA_TABLES)),
           text="Writing the dictionary.")
    b.final("Profiled 14 tables (row counts, nulls, date ranges) and wrote docs/data-dictionary.md.")
    return "profiles 14 tables: describe, counts and nulls, date range each, then a data dictionary (43 calls)", \
        "Profile the newly loaded tables and write a data dictionary."


# -- 9. retry ---------------------------------------------------------------------------------------------------

CUSTOMERS = {f"{n}@{dom}": {"name": n.title(), "plan": plan, "seats": seats}
             for n, dom, plan, seats in [("amara", "acme.io", "team", 18), ("bo", "globex.com", "business", 60),
                                         ("chen", "initech.net", "team", 7), ("dagny", "acme.io", "free", 1),
                                         ("emil", "globex.com", "business", 120), ("farah", "initech.net", "team", 25)]}


def retry_loop_crm(b: HB) -> tuple[str, str]:
    d = desk_tools(b)
    cust = json.loads(json.dumps(CUSTOMERS))
    cust["emil@globex.com"].update(fail=-1, error="CRM: 502 Bad Gateway (upstream crm-proxy)")
    b.options = {"modules": [], "files": {f"{STATE}/helpdesk.json": desk({}, KB, cust)}}
    b.turn(d["crm"](contains("team"), email="amara@acme.io"), text="Looking up the first account.")
    b.turn(d["crm"](contains("business"), email="bo@globex.com"), text="Next account.")
    for n in range(10):
        b.turn(d["crm"](error("502 Bad Gateway"), email="emil@globex.com"),
               text="Next account." if n == 0 else "Retrying the lookup.", loop_start=n == 0)
    b.final("I could not retrieve emil@globex.com.")
    return "two lookups succeed, then the same lookup fails with the same 502 ten times", \
        "Give me plan and seats for amara@acme.io, bo@globex.com and emil@globex.com."


def retry_loop_web(b: HB) -> tuple[str, str]:
    w = web_tools(b)
    url = "https://pyfastjson.readthedocs.io/install"
    b.options = {"modules": [], "files": {f"{STATE}/web.json": web(PAGES, {url: (-1, ("HTTP 429 Too Many Requests "
                                                                                  "(Retry-After: 3600)"))})}}
    b.turn(w["search"](hits(1), query="pyfastjson install"), text="Searching.")
    for n in range(9):
        b.turn(w["fetch"](error("429"), url=url), text="Fetching the install docs." if n == 0 else "Trying again.",
               loop_start=n == 0)
    b.final("The docs site keeps rate-limiting me.")
    return "one search, then the same page fetched 9 times, each a 429", "How do I install pyfastjson from source?"


def retry_healthy_crm(b: HB) -> tuple[str, str]:
    d = desk_tools(b)
    cust = json.loads(json.dumps(CUSTOMERS))
    cust["bo@globex.com"].update(fail=1, error="CRM: 503 Service Unavailable")
    cust["dagny@acme.io"].update(fail=2, error="CRM: request timed out after 10s")
    cust["farah@initech.net"].update(fail=1, error="CRM: 429 rate limited, retry shortly")
    b.options = {"modules": [], "files": {f"{STATE}/helpdesk.json": desk({}, KB, cust)}}
    fails = {"bo@globex.com": 1, "dagny@acme.io": 2, "farah@initech.net": 1}
    for email in CUSTOMERS:
        for k in range(fails.get(email, 0)):
            b.turn(d["crm"](error(), email=email), text=f"Looking up {email}." if k == 0 else "Retrying.")
        b.turn(d["crm"](contains("seats"), email=email), text="Retrying." if email in fails else f"Looking up {email}.")
    b.final("Seats: amara 18, bo 60, chen 7, dagny 1, emil 120, farah 25 (231 total).")
    return "six CRM lookups; transient 503, timeouts and 429 on three, every retry succeeds", \
        "How many seats do our six pilot customers have in total?"


# -- 10. rerun --------------------------------------------------------------------------------------------------


def rerun_loop_checks(b: HB) -> tuple[str, str]:
    c = code_tools(b, "checks")
    b.options = code_files(**{"src/durations.py": durations(), "tests/test_durations.py": DURATIONS_TESTS})
    b.turn(c["view"](contains("test_hours"), filename="tests/test_durations.py"), text="Reading the tests.")
    for n in range(10):
        b.turn(c["test"](failing(2), scope="tests/test_durations.py"),
               text="Running the checks." if n == 0 else "Maybe it was flaky; running them again.", loop_start=n == 0)
    b.final("The duration checks fail consistently.")
    return "re-runs the same failing checks 10 times without changing anything", \
        "The durations checks are red on main. Are they flaky?"


def rerun_healthy_unittest(b: HB) -> tuple[str, str]:
    c = code_tools(b, "shell")
    b.options = code_files(**{"src/ledger.py": ledger(("fmt", "overdue")), "tests/test_ledger.py": LEDGER_TESTS})
    cmd = "python -m unittest tests.test_ledger -v"
    b.turn(c["test"](contains("FAILED (failures=2)"), cmdline=cmd), text="Running the ledger tests.")
    for bug, want in (("fmt", "FAILED (failures=1)"), ("overdue", "\nOK")):
        bad, good = LEDGER_FIXED[bug]
        b.turn(c["patch"](OK, filename="src/ledger.py", search=bad, replacement=good), text=f"Fixing {bug}.")
        b.turn(c["test"](contains(want), cmdline=cmd), text="Re-running.")
    b.final("Both failures fixed; the ledger tests pass.")
    return "the same unittest command after each of 2 edits, failures 2 → 1 → OK", \
        "format_amount and overdue are broken; fix them."


def rerun_healthy_docs(b: HB) -> tuple[str, str]:
    d = doc_tools(b)
    b.options = {"modules": [], "files": _docs_with_broken(3)}
    b.turn(d["build"](failing(3), strict="yes"), text="Building strictly.")
    left = 3
    for page, bad, good in [("docs/auth.md", "error-codes.md", "errors.md"), ("docs/events.md", "retry.md", "retries.md"),
                            ("docs/errors.md", "event.md", "events.md")]:
        b.turn(d["replace"](OK, doc_path=page, find=f"({bad})", replace_with=f"({good})"), text=f"Fixing {page}.")
        left -= 1
        b.turn(d["build"](failing(left), strict="yes"), text="Rebuilding.")
    b.final("Strict build passes.")
    return "the same strict docs build after each of 3 link fixes, warnings 3 → 0", "Make the strict docs build pass."


# -- 11. parallel -----------------------------------------------------------------------------------------------


def parallel_loop_k8s(b: HB) -> tuple[str, str]:
    k = k8s_tools(b)["k"]
    b.options = {"modules": [], "files": {f"{STATE}/cluster.json": CLUSTER}}
    for n in range(6):
        b.turn(k(contains("CrashLoopBackOff"), args="get pods -n payments"),
               k(contains("OOMKilled"), args="get events -n payments"),
               text="Checking pods and events." if n == 0 else "Checking both again.", loop_start=n == 0)
    b.final("ledger-api keeps crashing.")
    return "the same pod list and event list in parallel, 6 times", "Why does ledger-api keep restarting?"


def parallel_loop_desk(b: HB) -> tuple[str, str]:
    d = desk_tools(b)
    tk = {"T-5120": ("vip", "emil@globex.com", "Seats not updated", "We bought 20 seats yesterday but still have 120.")}
    b.options = {"modules": [], "files": {f"{STATE}/helpdesk.json": desk(tk, KB, CUSTOMERS)}}
    b.turn(d["kb"](hits(1), terms="seats billed pro rata"), text="Reading up on seat billing.")
    for n in range(5):
        b.turn(d["get"](contains("20 seats"), ticket_id="T-5120"), d["crm"](contains("120"), email="emil@globex.com"),
               text="Comparing the ticket with the CRM." if n == 0 else "Comparing again.", loop_start=n == 0)
    b.final("The CRM still shows 120 seats.")
    return "one article search, then the same ticket and CRM lookup in parallel, 5 times", "Handle VIP ticket T-5120."


def parallel_healthy_sql(b: HB) -> tuple[str, str]:
    s = sql_tools(b)
    st = b.use("pipeline_status", "Get the state of a pipeline run.", {"run_id": "Run id."},
               lambda ws, run_id: pipeline_status(ws, run_id))
    runs = {"r-sync-customers": ("sync_customers", ["running", "success"]),
            "r-sync-orders": ("sync_orders", ["running", "running", "success"]),
            "r-sync-refunds": ("sync_refunds", ["queued", "running", "success"])}
    b.options = {"modules": [], "files": {f"{STATE}/warehouse.sql": warehouse_sql(), f"{STATE}/pipelines.json": pipelines(runs)}}
    for n in range(3):
        b.turn(*[st(status(sched[min(n, len(sched) - 1)]), run_id=r) for r, (_, sched) in runs.items()
                 if n < len(sched)], text="Checking the three syncs." if n == 0 else "Checking the ones still going.")
    tables = ["customers", "orders", "order_items", "refunds"]
    b.turn(*[s["describe"](OK, table=t) for t in tables], text="Describing the synced tables.")
    b.turn(*[s["sql"](hits(1), query=f"SELECT COUNT(*) FROM {t}") for t in tables], text="Counting rows.")
    b.final("All three syncs succeeded: customers 40, orders 120, order_items 200, refunds 20 rows.")
    return "polls three sync runs in parallel until each succeeds, then parallel describes and counts of 4 tables", \
        "Wait for the morning syncs and sanity-check the row counts."


# -- 12. exploration --------------------------------------------------------------------------------------------


def exploration_loop_code(b: HB) -> tuple[str, str]:
    c = code_tools(b, "checks")
    ls = b.use("list_source", "List source files under a folder.", {"folder": "Folder."}, lambda ws, folder: f_list(ws, folder))
    sc = b.use("search_source", "Regex search over the Python sources.", {"regex": "Pattern.", "folder": "Folder."},
               lambda ws, regex, folder: f_search_code(ws, regex, folder))
    b.options = code_files(**{"src/durations.py": durations(), "tests/test_durations.py": DURATIONS_TESTS,
                              "src/cli.py": "from durations import parse_duration\n\n\ndef main(arg):\n"
                                            "    print(parse_duration(arg))\n"})
    b.turn(c["test"](failing(2)), text="Running the checks first.")
    for n in range(5):
        b.turn(ls(hits(2), folder="src"), text="Listing the sources." if n == 0 else "Back to the file list.",
               loop_start=n == 0)
        b.turn(sc(hits(1), regex="parse_duration", folder="src"), text="Where is parse_duration used?")
        b.turn(c["view"](contains("UNITS"), filename="src/durations.py"), text="Reading durations.py.")
    b.final("I have not found the cause yet.")
    return "list → search → view of the same files, 5 times", "Hours are parsed wrong by the CLI. Track it down."


CLUSTER_DATA: dict[str, Any] = {
    "namespaces": {
        "payments": {
            "pods": [["ledger-api-5f7b9c-2kq8d", "0/1", "CrashLoopBackOff", "14"],
                     ["ledger-worker-7c4d8-9hx2m", "1/1", "Running", "0"]],
            "deployments": [["ledger-api", "0/1", "1", "0"], ["ledger-worker", "1/1", "1", "1"]],
            "events": ["Warning  BackOff   pod/ledger-api-5f7b9c-2kq8d  Back-off restarting failed container",
                       "Warning  OOMKilled pod/ledger-api-5f7b9c-2kq8d  Container ledger exceeded memory limit 256Mi"],
            "logs": {"ledger-api-5f7b9c-2kq8d": "loading ledger snapshot (412 MB)...\nKilled"},
            "describe": {"ledger-api-5f7b9c-2kq8d": "Last State: Terminated (OOMKilled)\nLimits: memory 256Mi\n"},
        },
        "search": {
            "pods": [["search-api-6c8f9-xk2lp", "1/1", "Running", "0"], ["search-indexer-0", "0/1", "Pending", "0"]],
            "deployments": [["search-api", "1/1", "1", "1"]],
            "events": ["Warning  FailedScheduling  pod/search-indexer-0  0/4 nodes available: insufficient memory"],
            "logs": {"search-api-6c8f9-xk2lp": "GET /q?term=boots 500\nindex backend: connection refused "
                                              "(search-indexer-0:9200)", "search-indexer-0": ""},
            "describe": {"search-indexer-0": "Events: FailedScheduling insufficient memory\nRequests: memory 6Gi\n"},
        },
        "shop": {"pods": [["checkout-84d7b-1", "1/1", "Running", "0"], ["cart-66f2a-1", "1/1", "Running", "0"]],
                 "deployments": [["checkout", "1/3", "3", "1"], ["cart", "3/3", "3", "3"]], "events": [], "logs": {}},
    },
    "rollouts": {
        "shop/deployment/checkout": {"schedule": [ROLL.format(a=1)], "polls": 0},
        "shop/deployment/cart": {"schedule": [
            "Waiting for deployment \"cart\" rollout to finish: 1 out of 3 new replicas have been updated...",
            "Waiting for deployment \"cart\" rollout to finish: 2 out of 3 new replicas have been updated...",
            "Waiting for deployment \"cart\" rollout to finish: 1 old replicas are pending termination...",
            "deployment \"cart\" successfully rolled out"], "polls": 0},
    },
}
CLUSTER = json.dumps(CLUSTER_DATA)


def exploration_healthy_ops(b: HB) -> tuple[str, str]:
    k = k8s_tools(b)["k"]
    health = b.use("service_health", "Health probe summary of a service.", {"service": "Service name."},
                   lambda ws, service: service_health(ws, service))
    metrics = b.use("query_metrics", "Query a metric of a service over the last 15 minutes.",
                    {"service": "Service.", "metric": "Metric name, e.g. memory_working_set."},
                    lambda ws, service, metric: query_metrics(ws, service, metric))
    runbook = b.use("open_runbook", "Open an on-call runbook.", {"name": "Runbook file name."},
                    lambda ws, name: f_read(ws, f"runbooks/{name}"))
    wr = b.use("write_manifest", "Write a Kubernetes manifest file.", {"path": "Manifest path.", "yaml": "Full YAML."},
               lambda ws, path, yaml: f_write(ws, path, yaml))
    cl = json.loads(CLUSTER)
    b.options = {"modules": [], "files": {
        f"{STATE}/cluster.json": json.dumps(cl),
        f"{STATE}/health.json": json.dumps({"ledger-api": {"schedule": ["down", "healthy"], "polls": 0}}),
        f"{STATE}/metrics.json": json.dumps({"ledger-api": {"memory_working_set": "peaks at 255Mi before each restart",
                                                            "restarts": "14"}}),
        "runbooks/oom.md": "# OOMKilled pods\n\nRaise the memory limit in the deployment manifest, apply it, "
                           "then confirm the service probe is healthy.\n",
        "deploy/ledger-api.yaml": "kind: Deployment\nmetadata:\n  name: ledger-api\nresources:\n  limits:\n    memory: 256Mi\n"}}
    steps = [
        health(status("down"), service="ledger-api"),
        k(contains("CrashLoopBackOff"), args="get pods -n payments"),
        k(contains("OOMKilled"), args="describe pod ledger-api-5f7b9c-2kq8d -n payments"),
        k(contains("412 MB"), args="logs ledger-api-5f7b9c-2kq8d -n payments"),
        metrics(contains("255Mi"), service="ledger-api", metric="memory_working_set"),
        k(contains("memory limit"), args="get events -n payments"),
        runbook(contains("memory limit"), name="oom.md"),
        wr(OK, path="deploy/ledger-api.yaml",
           yaml="kind: Deployment\nmetadata:\n  name: ledger-api\nresources:\n  limits:\n    memory: 768Mi\n"),
        k(contains("configured"), args="apply -f deploy/ledger-api.yaml"),
        k(contains("ledger-worker"), args="get deployments -n payments"),
        health(status("healthy"), service="ledger-api"),
    ]
    texts = ["Probing the service.", "Pods.", "Describing the crashing pod.", "Its logs.", "Memory usage.",
             "Namespace events.", "What the runbook says.", "Raising the memory limit.", "Applying.",
             "Checking the deployments.", "Probing again."]
    for call, text in zip(steps, texts, strict=True):
        b.turn(call, text=text)
    b.final("ledger-api was OOMKilled loading a 412 MB snapshot with a 256Mi limit; raised it to 768Mi, it is healthy.")
    return "an incident investigated with probes, pods, describe, logs, metrics, events and a runbook, then fixed", \
        "ledger-api is down. Find out why and fix it."


def exploration_healthy_sql(b: HB) -> tuple[str, str]:
    s = sql_tools(b)
    cat = b.use("search_catalog", "Search the data catalog for datasets by keywords.", {"keywords": "Keywords."},
                lambda ws, keywords: search_catalog(ws, keywords))
    d = doc_tools(b)
    broken = ("CREATE VIEW daily_revenue AS SELECT o.order_date, SUM(o.total) - COALESCE(SUM(r.refunded_cents), 0) AS "
              "net FROM orders o LEFT JOIN refunds r ON r.order_id = o.id WHERE o.status = 'paid' GROUP BY o.order_date")
    fixed = ("DROP VIEW IF EXISTS daily_revenue; CREATE VIEW daily_revenue AS SELECT o.order_date, SUM(o.amount_cents) "
             "- COALESCE(SUM(r.refunded_cents), 0) AS net FROM orders o LEFT JOIN refunds r ON r.order_id = o.id "
             "WHERE o.status = 'paid' GROUP BY o.order_date")
    b.options = {"modules": [], "files": {f"{STATE}/warehouse.sql": warehouse_sql() + broken + ";\n",
                                          f"{STATE}/catalog.json": json.dumps(CATALOG)}}
    steps = [
        (s["tables"](hits(5)), "What is in the warehouse?"),
        (cat(hits(1), keywords="revenue per day"), "What is daily_revenue supposed to be?"),
        (s["sql"](error("no such column"), query="SELECT * FROM daily_revenue LIMIT 5"), "Sampling the view."),
        (s["sql"](contains("o.total"), query="SELECT sql FROM sqlite_master WHERE name = 'daily_revenue'"),
         "Reading the view definition."),
        (s["describe"](contains("amount_cents"), table="orders"), "Columns of orders."),
        (s["describe"](contains("refunded_cents"), table="refunds"), "Columns of refunds."),
        (s["sql"](hits(3), query="SELECT status, COUNT(*) FROM orders GROUP BY status"), "Order statuses."),
        (s["sql"](contains("statement ok"), query=fixed), "Recreating the view with amount_cents."),
        (s["sql"](hits(5), query="SELECT * FROM daily_revenue ORDER BY order_date LIMIT 5"), "Sampling it again."),
        (d["write"](OK, doc_path="docs/daily_revenue.md", markdown="# daily_revenue\n\nPaid order totals per day "
                    "(amount_cents) minus refunds. Fixed: referenced a non-existent column total.\n"), "Documenting."),
    ]
    for call, text in steps:
        b.turn(call, text=text)
    b.final("daily_revenue referenced orders.total, which does not exist; it now uses amount_cents and works.")
    return "explores a warehouse with listings, catalog, samples, definitions and descriptions, then fixes a view", \
        "The revenue dashboard is empty. Look around the warehouse and fix it."


# -- the catalog ------------------------------------------------------------------------------------------------

Generator = Callable[[HB], tuple[str, str]]

#: (class, label, generator), in recording order; dialects are assigned round robin.
RUNS: list[tuple[str, str, Generator]] = [
    ("repeat", "loop", repeat_loop_web), ("repeat", "loop", repeat_loop_k8s), ("repeat", "healthy", repeat_healthy_desk),
    ("search", "loop", search_loop_kb), ("search", "healthy", search_healthy_web),
    ("search", "healthy", search_healthy_catalog),
    ("test_fix", "loop", test_fix_loop_checks), ("test_fix", "loop", test_fix_loop_docs),
    ("test_fix", "healthy", test_fix_healthy_unittest),
    ("edits", "loop", edits_loop_manifest), ("edits", "healthy", edits_healthy_imports),
    ("edits", "healthy", edits_healthy_docs),
    ("alternating", "loop", alternating_loop_k8s), ("alternating", "loop", alternating_loop_sql),
    ("alternating", "healthy", alternating_healthy_desk),
    ("multi_agent", "loop", multi_agent_loop_sql), ("multi_agent", "healthy", multi_agent_healthy_docs),
    ("multi_agent", "healthy", multi_agent_healthy_checks),
    ("polling", "loop", polling_loop_pipeline), ("polling", "loop", polling_loop_rollout),
    ("polling", "healthy", polling_healthy_rollout),
    ("long_run", "loop", long_loop_web), ("long_run", "healthy", long_healthy_desk),
    ("long_run", "healthy", long_healthy_sql),
    ("retry", "loop", retry_loop_crm), ("retry", "loop", retry_loop_web), ("retry", "healthy", retry_healthy_crm),
    ("rerun", "loop", rerun_loop_checks), ("rerun", "healthy", rerun_healthy_unittest),
    ("rerun", "healthy", rerun_healthy_docs),
    ("parallel", "loop", parallel_loop_k8s), ("parallel", "loop", parallel_loop_desk),
    ("parallel", "healthy", parallel_healthy_sql),
    ("exploration", "loop", exploration_loop_code), ("exploration", "healthy", exploration_healthy_ops),
    ("exploration", "healthy", exploration_healthy_sql),
]

AGENT_INSTRUCTIONS = "You are an autonomous agent. Use the tools to complete the user's request, then answer."


def catalog() -> dict[str, Scenario]:
    """Every held-out run by id, with its dialect."""
    out: dict[str, Scenario] = {}
    seen: dict[tuple[str, str], int] = {}
    for k, (cls, label, gen) in enumerate(RUNS):
        n = seen[(cls, label)] = seen.get((cls, label), 0) + 1
        dialect = DIALECTS[(k + k // len(DIALECTS)) % len(DIALECTS)]
        sid = f"{cls}-{label}-{n:02d}"
        b = HB(sid, cls, label, k)
        desc, task = gen(b)
        if not b.agents:
            b.agents = {b.agent: AGENT_INSTRUCTIONS}
        sc = b.build(desc, task)
        sc.dialect = dialect
        sc.id = f"{dialect}.{sid}"
        out[sc.id] = sc
    return out
