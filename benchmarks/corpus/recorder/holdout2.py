"""The second held-out set: the 38 stories of ``benchmarks/holdout2/SCENARIOS.md``, as real tools.

The stories were written down before anything was recorded; this module implements them as written (a
change, where one was needed, is noted and dated in SCENARIOS.md). The tools are real functions over the
run's workspace (state files, a SQLite schema, source files the agents really edit), and they answer the
way production services do: every result carries the noise of its kind of service (a request id as a
UUID, ULID or ``req_`` + base62; a server time as RFC 3339 with a zone, epoch milliseconds or an HTTP
date; a duration; a cursor or page token where the service pages). Half the runs answer in JSON, half in
text, and a quarter of the texts are German or Japanese. The test runners (Gradle/JUnit, ``go test``,
``cargo test``, Jest, PHPUnit) are not run: each evaluates the workspace's real source files against the
story's tests and prints its runner's own output format, durations and all.

``python benchmarks/corpus/record.py --holdout2`` records it into ``benchmarks/holdout2/``.
"""

from __future__ import annotations

import email.utils
import functools
import json
import random
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from .drivers import DIALECTS
from .holdout import HB, _locked
from .script import OK, Call, Expect, Scenario, contains, error, failing, hits, status
from .workspace import ToolError, Workspace, load_state, save_state

EMPTY = Expect("empty")
STATE = ".svc"
Result = tuple[str, dict[str, Any]]

# -- production noise -------------------------------------------------------------------------------------------

B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ZONES = [timezone(timedelta(hours=1)), timezone(timedelta(hours=-5)), timezone(timedelta(hours=9)), UTC]


@functools.cache
def _rng(seed: str) -> random.Random:
    """One generator per run (a run is one process): ids differ on every call, reproducibly per run."""
    return random.Random(seed)


def rng(ws: Workspace) -> random.Random:
    return _rng(str(ws.options.get("seed", "")))


def new_id(ws: Workspace, kind: str | None = None) -> str:
    """A fresh request id in the run's form (``uuid``, ``ulid`` or ``req``)."""
    r = rng(ws)
    kind = kind or ws.options.get("noise", ("uuid",))[0]
    if kind == "ulid":
        ms = int(time.time() * 1000)
        head = "".join(CROCKFORD[(ms >> (5 * i)) & 31] for i in reversed(range(10)))
        return head + "".join(r.choice(CROCKFORD) for _ in range(16))
    if kind == "req":
        return "req_" + "".join(r.choice(B62) for _ in range(22))
    return str(uuid.UUID(int=r.getrandbits(128), version=4))


def now(ws: Workspace, kind: str | None = None) -> str | int:
    """The server's time in the run's form (``rfc3339`` with a zone, ``epoch_ms``, ``http``)."""
    kind = kind or ws.options.get("noise", ("", "rfc3339"))[1]
    t = time.time()
    if kind == "epoch_ms":
        return int(t * 1000)
    if kind == "http":
        return email.utils.formatdate(t, usegmt=True)
    zone = ZONES[len(str(ws.options.get("seed", ""))) % len(ZONES)]
    return datetime.fromtimestamp(t, zone).isoformat(timespec="milliseconds")


def took(ws: Workspace) -> tuple[str, Any]:
    """A duration: (``took_ms``, 37) or (``elapsed``, "1.3s")."""
    r = rng(ws)
    if ws.options.get("noise", ("", "", "ms"))[2] == "ms":
        return "took_ms", r.randint(8, 480)
    return "elapsed", f"{r.uniform(0.05, 2.4):.1f}s"


def token(ws: Workspace, n: int = 24) -> str:
    return "".join(rng(ws).choice(B62) for _ in range(n))


LABELS = {"en": ("request-id", "date", "took"), "de": ("Anfrage-ID", "Serverzeit", "Dauer"),
          "ja": ("リクエストID", "サーバー時刻", "所要時間")}


def reply(ws: Workspace, body: dict[str, Any], text: str, meta: dict[str, Any] | None = None) -> Result:
    """A service's answer: ``body`` as JSON, or ``text`` (already in the run's language), with noise."""
    key, dur = took(ws)
    if ws.options.get("style") == "json":
        return json.dumps({"request_id": new_id(ws), **body, "server_time": now(ws), key: dur},
                          ensure_ascii=False), meta or {}
    rid, date, tk = LABELS[ws.options.get("lang", "en")]
    d = f"{dur} ms" if key == "took_ms" else dur
    return f"{text}\n{rid}: {new_id(ws)} | {date}: {now(ws)} | {tk}: {d}", meta or {}


def fail(ws: Workspace, code: int, body: dict[str, Any], text: str) -> ToolError:
    """A failed call, worded as the service words it (JSON error body or a text line), with noise."""
    msg, _ = reply(ws, {"status": code, "error": body}, f"HTTP {code} {text}")
    return ToolError(msg)


def lang(ws: Workspace) -> str:
    return str(ws.options.get("lang", "en"))


def tr(ws: Workspace, en: str, de: str = "", ja: str = "") -> str:
    return {"de": de or en, "ja": ja or en}.get(lang(ws), en)


# -- state ------------------------------------------------------------------------------------------------------


def load(ws: Workspace, name: str) -> Any:
    return load_state(ws, STATE, name, "503 Service Unavailable: {name} backend not configured")


def save(ws: Workspace, name: str, data: Any) -> None:
    save_state(ws, STATE, name, data)


def state(**files: Any) -> dict[str, str]:
    return {f"{STATE}/{k.replace('__', '.')}.json": json.dumps(v, ensure_ascii=False) for k, v in files.items()}


def _next(ws: Workspace, store: str, key: str) -> Any:
    """The next entry of a schedule (the last repeats); counts the poll."""
    data = load(ws, store)
    if key not in data:
        raise fail(ws, 404, {"code": "not_found", "id": key}, f"Not Found: {key}")
    item = data[key]
    entry = item["schedule"][min(item["polls"], len(item["schedule"]) - 1)]
    item["polls"] += 1
    save(ws, store, data)
    return entry


def _failures_left(ws: Workspace, store: str, key: str) -> int:
    """Consumes one scripted failure of ``key`` (-1: fails forever); returns how many were left."""
    data = load(ws, store)
    left = int(data.get("fail", {}).get(key, 0))
    if left > 0:
        data["fail"][key] = left - 1
        save(ws, store, data)
    return left


# -- files ------------------------------------------------------------------------------------------------------


def show_file(ws: Workspace, path: str) -> Result:
    p = ws.path(path)
    if not p.is_file():
        raise ToolError(f"no such file: {path}")
    return p.read_text(), {}


def modify_file(ws: Workspace, path: str, old: str, new: str) -> Result:
    p = ws.path(path)
    if not p.is_file():
        raise ToolError(f"no such file: {path}")
    text = p.read_text()
    if text.count(old) != 1:
        raise ToolError(f"{path}: the text to replace occurs {text.count(old)} times (needs exactly one)")
    p.write_text(text.replace(old, new))
    return f"{path}: 1 replacement", {}


def apply_patch(ws: Workspace, file: str, diff: str) -> Result:
    """A one-hunk unified diff: context and '-' lines must be found once; '+' lines replace them."""
    p = ws.path(file)
    if not p.is_file():
        raise ToolError(f"error: {file}: No such file or directory")
    old, new = [], []
    for ln in diff.splitlines():
        if ln.startswith(("---", "+++", "@@")):
            continue
        if ln.startswith("-"):
            old.append(ln[1:])
        elif ln.startswith("+"):
            new.append(ln[1:])
        else:
            old.append(ln[1:])
            new.append(ln[1:])
    text = p.read_text()
    a, b = "\n".join(old), "\n".join(new)
    if text.count(a) != 1:
        raise ToolError(f"error: patch failed: {file}: hunk does not apply")
    p.write_text(text.replace(a, b))
    return f"Applied patch to '{file}' cleanly.", {}


def put_file(ws: Workspace, path: str, content: str) -> Result:
    p = ws.path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(content)
    return json.dumps({"written": len(content.encode()), "etag": f'W/"{token(ws, 16)}"'}), {}


# -- test runners: the story's tests over the real files, in each runner's words ------------------------------


@dataclass(frozen=True)
class Check:
    """One test: it passes when ``needle`` is in ``file`` (and ``absent``, if given, is not)."""

    name: str
    group: str
    file: str
    needle: str
    message: str
    absent: str = ""


def _evaluate(ws: Workspace, tests: list[Check]) -> tuple[list[Check], list[Check]]:
    failed: list[Check] = []
    passed: list[Check] = []
    for t in tests:
        text = ws.path(t.file).read_text() if ws.path(t.file).is_file() else ""
        ok = t.needle in text and not (t.absent and t.absent in text)
        (passed if ok else failed).append(t)
    return failed, passed


def _tests(ws: Workspace) -> list[Check]:
    return [Check(**t) for t in load(ws, "tests.json")]


def gradle(ws: Workspace, module: str) -> Result:
    failed, passed = _evaluate(ws, _tests(ws))
    r = rng(ws)
    lines = [f"> Task :{module}:compileDebugKotlin", f"> Task :{module}:testDebugUnitTest" + (" FAILED" if failed else "")]
    for t in failed:
        lines += ["", f"{t.group} > {t.name} FAILED", f"    java.lang.AssertionError: {t.message}",
                  f"        at {t.group}.{t.name}({t.group}.kt:{40 + len(t.name) % 20})"]
    n = len(failed) + len(passed)
    secs = r.randint(6, 19)
    if failed:
        lines += ["", f"{n} tests completed, {len(failed)} failed", "", "FAILURE: Build failed with an exception.", "",
                  "* What went wrong:", f"Execution failed for task ':{module}:testDebugUnitTest'.",
                  "> There were failing tests. See the report at: "
                  f"file:///workspace/{module}/build/reports/tests/testDebugUnitTest/index.html", "",
                  f"BUILD FAILED in {secs}s"]
    else:
        lines += ["", f"BUILD SUCCESSFUL in {secs}s"]
    lines += [f"{r.randint(20, 40)} actionable tasks: {r.randint(3, 9)} executed, {r.randint(10, 30)} up-to-date",
              "", "Publishing build scan...", f"https://gradle.com/s/{''.join(r.choice('abcdefghijklmnopqrstuvwxyz234567') for _ in range(13))}"]
    return "\n".join(lines), {"failed": len(failed)}


def go_test(ws: Workspace, packages: str) -> Result:
    failed, passed = _evaluate(ws, _tests(ws))
    r = rng(ws)
    groups = sorted({t.group for t in failed + passed})
    lines = []
    for g in groups:
        bad = [t for t in failed if t.group == g]
        for t in bad:
            lines += [f"--- FAIL: {t.name} (0.00s)", f"    {t.message}"]
        if bad:
            lines += ["FAIL", f"FAIL\texample.com/shop/{g}\t{r.uniform(0.004, 0.09):.3f}s"]
        else:
            lines.append(f"ok  \texample.com/shop/{g}\t{r.uniform(0.004, 0.09):.3f}s")
    if failed:
        lines.append("FAIL")
    return f"$ go test {packages}\n" + "\n".join(lines), {"failed": len(failed)}


def cargo_test(ws: Workspace, filter: str = "") -> Result:
    failed, passed = _evaluate(ws, _tests(ws))
    r = rng(ws)
    allt = sorted(failed + passed, key=lambda t: t.name)
    lines = ["   Compiling tally v0.3.1 (/workspace)", f"    Finished `test` profile [unoptimized + debuginfo] target(s) "
             f"in {r.uniform(0.8, 3.5):.2f}s", "     Running unittests src/lib.rs (target/debug/deps/tally-"
             f"{''.join(r.choice('0123456789abcdef') for _ in range(16))})", "", f"running {len(allt)} tests"]
    lines += [f"test {t.group}::tests::{t.name} ... {'FAILED' if t in failed else 'ok'}" for t in allt]
    if failed:
        lines += ["", "failures:", ""]
        for t in failed:
            lines += [f"---- {t.group}::tests::{t.name} stdout ----",
                      f"thread '{t.group}::tests::{t.name}' panicked at src/{t.group}.rs:{60 + len(t.name)}:9:",
                      t.message, "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace", ""]
        lines += ["", "failures:"] + [f"    {t.group}::tests::{t.name}" for t in failed]
    res = "FAILED" if failed else "ok"
    lines += ["", f"test result: {res}. {len(passed)} passed; {len(failed)} failed; 0 ignored; 0 measured; "
              f"0 filtered out; finished in {r.uniform(0.01, 0.6):.2f}s"]
    if failed:
        lines += ["", "error: test failed, to rerun pass `--lib`"]
    return "\n".join(lines), {"failed": len(failed)}


def jest(ws: Workspace, pattern: str = "") -> Result:
    failed, passed = _evaluate(ws, _tests(ws))
    r = rng(ws)
    suites = sorted({t.group for t in failed + passed})
    bad_suites = [s for s in suites if any(t.group == s for t in failed)]
    lines = ["> app@1.4.0 test", "> jest" + (f" {pattern}" if pattern else ""), ""]
    for s in suites:
        lines.append(f"{' FAIL ' if s in bad_suites else ' PASS '} {s} ({r.uniform(0.3, 2.5):.3f} s)")
    for t in failed:
        lines += ["", f"  ● {t.name}", "", f"    {t.message}", "", f"      at Object.<anonymous> ({t.group}:{20 + len(t.name) % 30}:{r.randint(5, 30)})"]
    n = len(failed) + len(passed)
    lines += ["", f"Test Suites: {f'{len(bad_suites)} failed, ' if bad_suites else ''}{len(suites) - len(bad_suites)} passed, "
              f"{len(suites)} total",
              f"Tests:       {f'{len(failed)} failed, ' if failed else ''}{len(passed)} passed, {n} total",
              "Snapshots:   0 total", f"Time:        {r.uniform(1.2, 6.5):.3f} s", "Ran all test suites."
              + (f"\nnpm ERR! code {1}\nnpm ERR! Test failed.  See above for more details." if failed else "")]
    return "\n".join(lines), {"failed": len(failed), "suites_failed": len(bad_suites)}


def phpunit(ws: Workspace, filter: str) -> Result:
    tests = [t for t in _tests(ws) if not filter or filter in t.group]
    failed, _passed = _evaluate(ws, tests)
    r = rng(ws)
    n = len(tests)
    dots = "".join("F" if t in failed else "." for t in tests)
    lines = ["PHPUnit 11.5.2 by Sebastian Bergmann and contributors.", "", "Runtime:       PHP 8.3.14",
             "Configuration: /workspace/phpunit.xml", "", f"{dots:<63} {n} / {n} (100%)", "",
             f"Time: 00:00.{r.randint(200, 299)}, Memory: {r.choice(['10.00', '12.00', '14.00'])} MB", ""]
    if failed:
        lines.append(f"There {'was' if len(failed) == 1 else 'were'} {len(failed)} failure{'s' if len(failed) > 1 else ''}:")
        for i, t in enumerate(failed, 1):
            lines += ["", f"{i}) Tests\\{t.group}::{t.name}", t.message, "", f"/workspace/tests/{t.group}.php:{30 + i * 7}"]
        asserts = 2 * n + 3
        lines += ["", "FAILURES!", f"Tests: {n}, Assertions: {asserts}, Failures: {len(failed)}."]
    else:
        lines.append(f"OK ({n} tests, {2 * n + 3} assertions)")
    return "\n".join(lines), {"failed": len(failed)}


def tests_state(tests: list[Check]) -> dict[str, str]:
    return state(tests=[t.__dict__ for t in tests])


# -- the stories ---------------------------------------------------------------------------------------------------
# Each generator returns (description, task); the workspace files and the result style are set in b.options.


def _opts(b: HB, files: dict[str, str]) -> None:
    b.options.update({"modules": [], "files": files})


# 1. repeat ---------------------------------------------------------------------------------------------------------

FARES = {("FRA", "LIS", "2026-12-18"): [("LH1166", 219.0), ("TP575", 187.5)],
         ("MUC", "OPO", "2026-12-18"): [("LH1790", 241.0)], ("BER", "LIS", "2026-12-18"): [("TP543", 164.0), ("FR1452", 96.99)]}
ROUTES = [("FRA", "LIS"), ("MUC", "OPO"), ("BER", "LIS"), ("HAM", "BCN"), ("CGN", "FCO"), ("DUS", "ATH"), ("STR", "VIE"),
          ("FRA", "CPH"), ("MUC", "DUB"), ("BER", "OSL"), ("HAM", "PRG"), ("LEJ", "PMI")]


def _fares() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, (o, d) in enumerate(ROUTES):
        out[f"{o}-{d}"] = [{"flight": f"{['LH', 'TP', 'FR', 'EW', 'U2'][(i + j) % 5]}{1100 + i * 37 + j * 11}",
                            "fare": round(89 + (i * 53 + j * 31) % 260 + 0.99 * j, 2), "cabin": "economy"}
                           for j in range(1 + i % 3)]
    return out


@_locked
def fare_quote(ws: Workspace, origin: str, dest: str, date: str) -> Result:
    fares = load(ws, "fares.json").get(f"{origin}-{dest}")
    if fares is None:
        raise fail(ws, 404, {"code": "route_not_served"}, f"Not Found: no fares {origin}-{dest}")
    r = rng(ws)
    qid = new_id(ws, "ulid")
    priced = now(ws, "rfc3339")
    if ws.options.get("style") == "json":
        return reply(ws, {"quote_id": qid, "priced_at": priced, "origin": origin, "dest": dest, "date": date,
                          "currency": "EUR", "fares": fares}, "")
    rows = "\n".join(f"  {f['flight']:<8} {f['cabin']:<9} EUR {f['fare']:.2f}" for f in fares)
    return reply(ws, {}, f"Quote {qid} for {origin}→{dest} on {date}, priced {priced} (cache age {r.randint(1, 90)}s):\n{rows}")


def repeat_loop_fares(b: HB) -> tuple[str, str]:
    q = b.use("fare_quote", "Price economy fares for a route on a date.", {"origin": "IATA airport code.",
              "dest": "IATA airport code.", "date": "Travel date, YYYY-MM-DD."}, fare_quote)
    _opts(b, state(fares=_fares()))
    b.turn(q(contains("fare"), origin="MUC", dest="OPO", date="2026-12-18"), text="Pricing Munich to Porto first.")
    b.turn(q(contains("fare"), origin="BER", dest="LIS", date="2026-12-18"), text="And Berlin to Lisbon.")
    for k in range(10):
        b.turn(q(contains("fare"), origin="FRA", dest="LIS", date="2026-12-18"),
               text="Now Frankfurt to Lisbon." if k == 0 else ["Re-pricing FRA-LIS to be sure.", "Checking the FRA-LIS fare again.",
                                                             "One more quote for Frankfurt-Lisbon."][k % 3], loop_start=k == 0)
    b.final("The cheapest option is still unclear; FRA-LIS fares did not change.")
    return "two quotes for other routes, then the same route quoted 10 times (same fares, fresh quote_id/priced_at)", \
        "Find the cheapest way to get our team from Germany to Lisbon or Porto on 18 December."


PARCEL_DE = "Sendung {n}: in Zustellung (in_transit). Letzter Scan: Paketzentrum Radefeld, 25.11. 22:14 Uhr. Voraussichtliche Zustellung: 27.11."


@_locked
def track_parcel(ws: Workspace, tracking_no: str) -> Result:
    p = load(ws, "parcels.json").get(tracking_no)
    if p is None:
        raise fail(ws, 404, {"code": "unknown_tracking_no"}, "Not Found")
    rid = new_id(ws)
    if ws.options.get("style") == "json":
        return json.dumps({"x-request-id": rid, **p, "served_at": now(ws)}), {"status": p["status"]}
    text = PARCEL_DE.format(n=tracking_no) if lang(ws) == "de" else \
        f"Parcel {tracking_no}: in_transit. Last scan: Radefeld hub, 2026-11-25 22:14. ETA 2026-11-27."
    return f"{text}\nx-request-id: {rid}\nDate: {now(ws, 'http')}", {"status": p["status"]}


def repeat_loop_parcel(b: HB) -> tuple[str, str]:
    t = b.use("track_parcel", "Track a parcel by its tracking number.", {"tracking_no": "Carrier tracking number."}, track_parcel)
    _opts(b, state(parcels={"00340434161094042557": {"status": "in_transit", "last_scan": {
        "at": "2026-11-25T22:14:00+01:00", "location": "Radefeld hub"}, "eta": "2026-11-27"}}))
    for k in range(11):
        b.turn(t(status("in_transit"), tracking_no="00340434161094042557"),
               text="Tracking the parcel." if k == 0 else ["Checking the parcel again.", "Has it moved yet?"][k % 2],
               loop_start=k == 0)
    b.final("Die Sendung ist weiterhin in Zustellung.")
    return "tracks the same parcel 11 times: same status and last scan, fresh request id", \
        "Wo ist die Sendung 00340434161094042557? Sag Bescheid, sobald sie zugestellt ist."


@_locked
def write_itinerary(ws: Workspace, title: str, body: str) -> Result:
    p = ws.path(f"itineraries/{title}.md")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(body)
    return reply(ws, {"saved": f"itineraries/{title}.md", "bytes": len(body.encode())}, f"saved itineraries/{title}.md")


def repeat_healthy_fares(b: HB) -> tuple[str, str]:
    q = b.use("fare_quote", "Price economy fares for a route on a date.", {"origin": "IATA airport code.",
              "dest": "IATA airport code.", "date": "Travel date, YYYY-MM-DD."}, fare_quote)
    it = b.use("write_itinerary", "Save a travel itinerary document.", {"title": "Itinerary name.", "body": "Markdown."},
               write_itinerary)
    _opts(b, state(fares=_fares()))
    for o, d in ROUTES:
        b.turn(q(contains("EUR") if b.options.get("style") == "text" else contains("fare"), origin=o, dest=d, date="2027-01-14"),
               text=f"Pricing {o}-{d}.")
    b.turn(it(OK, title="offsite-2027", body="\n".join(f"- {o} → {d}: cheapest fare booked on request" for o, d in ROUTES)),
           text="Writing the itinerary.")
    b.final(f"Quoted all {len(ROUTES)} routes once and saved itineraries/offsite-2027.md.")
    return "quotes 12 different routes once each, then writes an itinerary", \
        "Price the offsite travel for our twelve offices (14 January) and write the itinerary."


def _invoices() -> dict[str, Any]:
    out = {}
    for i in range(11):
        lines: list[dict[str, Any]] = [{"sku": f"SV-{200 + (i * 7 + j) % 40}", "qty": 1 + (i + j) % 4, "unit": round(40 + (i * 13 + j * 29) % 300 + 0.5, 2)}
                 for j in range(1 + i % 4)]
        out[f"INV-2026-{1040 + i}"] = {"id": f"in_{i:02d}{(i * 7919) % 10000:04d}", "customer": "Brightwell GmbH",
                                       "currency": "EUR", "lines": lines,
                                       "total": round(sum(ln["qty"] * ln["unit"] for ln in lines), 2)}
    return out


@_locked
def get_invoice(ws: Workspace, invoice_no: str) -> Result:
    inv = load(ws, "invoices.json").get(invoice_no)
    if inv is None:
        raise fail(ws, 404, {"code": "invoice_not_found"}, "Not Found")
    text = f"Invoice {invoice_no} ({inv['id']}) — {inv['customer']}\n" + "\n".join(
        f"  {ln['sku']} x{ln['qty']} @ {ln['unit']:.2f}" for ln in inv["lines"]) + f"\n  total {inv['total']:.2f} EUR"
    return reply(ws, {"invoice_no": invoice_no, **inv}, text)


@_locked
def write_note(ws: Workspace, title: str, text: str) -> Result:
    p = ws.path(f"notes/{title}.md")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return reply(ws, {"note": f"notes/{title}.md", "version": 1}, f"note notes/{title}.md created")


def repeat_healthy_invoices(b: HB) -> tuple[str, str]:
    g = b.use("get_invoice", "Fetch an invoice with its lines and total.", {"invoice_no": "Invoice number."}, get_invoice)
    n = b.use("write_note", "Write a note for the finance team.", {"title": "Note title.", "text": "Note body."}, write_note)
    inv = _invoices()
    _opts(b, state(invoices=inv))
    for no in inv:
        b.turn(g(contains("total"), invoice_no=no), text=f"Fetching {no}.")
    b.turn(n(OK, title="brightwell-reconciliation", text="\n".join(f"{no}: {v['total']:.2f} EUR" for no, v in inv.items())),
           text="Writing the reconciliation note.")
    b.final(f"Reconciled {len(inv)} Brightwell invoices, total {sum(v['total'] for v in inv.values()):.2f} EUR.")
    return "fetches 11 different invoices once each, then writes a reconciliation note", \
        "Reconcile the eleven open Brightwell invoices (INV-2026-1040 … 1050) against the ledger."


# 2. search ---------------------------------------------------------------------------------------------------------


@_locked
def find_candidates(ws: Workspace, query: str) -> Result:
    return json.dumps({"search_id": new_id(ws), "query": query, "matches": [], "next": None,
                       "took_ms": rng(ws).randint(40, 300)}), {"hits": 0}


def search_loop_candidates(b: HB) -> tuple[str, str]:
    f = b.use("find_candidates", "Search the candidate pool.", {"query": "Free-text search."}, find_candidates)
    _opts(b, {})
    qs = ["staff rust engineer berlin", "senior rust developer, Berlin", "rust backend engineer berlin senior",
          "principal engineer rust germany", "rust systems programmer berlin", "staff software engineer rust remote germany",
          "lead rust developer berlin", "rustacean staff level berlin", "senior rust engineer distributed systems berlin",
          "rust engineer 8+ years berlin", "staff engineer (rust) berlin or remote"]
    for k, qq in enumerate(qs):
        b.turn(f(EMPTY, query=qq), text="Searching the pool." if k == 0 else "Rewording the search.", loop_start=k == 0)
    b.final("No candidates match the staff Rust role in Berlin.")
    return "11 reworded candidate searches, every answer empty with a fresh search_id", \
        "Find three staff-level Rust engineers in Berlin for the platform team."


@_locked
def artikel_suchen(ws: Workspace, begriff: str) -> Result:
    secs = f"0,0{rng(ws).randint(1, 9)}"
    return f'Keine Treffer für "{begriff}" ({secs} s)\nAnfrage-ID: {new_id(ws)}', {"hits": 0}


def search_loop_artikel(b: HB) -> tuple[str, str]:
    a = b.use("artikel_suchen", "Durchsucht den Artikelkatalog.", {"begriff": "Suchbegriff."}, artikel_suchen)
    _opts(b, {})
    terms = ["Akku-Bohrschrauber 18V bürstenlos", "Bohrschrauber 18 Volt brushless", "Akkuschrauber bürstenloser Motor",
             "18V Schrauber ohne Kohlebürsten", "kabelloser Bohrschrauber 18V", "Bohrschrauber Akku 18V Brushless Motor",
             "Akku Bohrmaschine 18V bürstenlos", "Schlagbohrschrauber 18V akku", "Bohrschrauber Li-Ion 18V", "Bohrschrauber bürstenlos"]
    for k, t in enumerate(terms):
        b.turn(a(EMPTY, begriff=t), text="Ich suche im Katalog." if k == 0 else "Ich formuliere die Suche um.", loop_start=k == 0)
    b.final("Ich habe keinen passenden Bohrschrauber gefunden.")
    return "10 reworded German catalogue searches, every answer 'Keine Treffer für …'", \
        "Finde einen bürstenlosen 18-V-Akku-Bohrschrauber in unserem Katalog."


PAPERS = {"sparse attention long context": 4, "retrieval augmented generation evaluation": 6, "mixture of experts routing": 3,
          "speculative decoding": 2, "kv cache compression": 5, "tokenizer free language models": 0,
          "instruction tuning data quality": 3, "agent tool use benchmarks": 4, "reward model overoptimization": 2}


@_locked
def search_papers(ws: Workspace, topic: str) -> Result:
    n = load(ws, "papers.json").get(topic, 0)
    items = [{"id": f"2{4 + i % 2}{(len(topic) * 37 + i * 101) % 12:02d}.{(len(topic) * 911 + i * 1777) % 100000:05d}",
              "title": f"{topic.title()}: study {i + 1}", "year": 2024 + i % 3} for i in range(n)]
    page = {"next_page_token": token(ws) if n > 3 else None}
    return reply(ws, {"topic": topic, "total": n, "papers": items[:3], **page},
                 f"{n} papers for '{topic}'" + "".join(f"\n  [{p['id']}] {p['title']} ({p['year']})" for p in items[:3])
                 + (f"\n  next page: {page['next_page_token']}" if page["next_page_token"] else ""), {"hits": n})


def search_healthy_papers(b: HB) -> tuple[str, str]:
    s = b.use("search_papers", "Search the paper index by topic.", {"topic": "Topic."}, search_papers)
    _opts(b, state(papers=PAPERS))
    for t, n in PAPERS.items():
        b.turn(s(hits(n) if n else EMPTY, topic=t), text=f"Searching {t}.")
    b.final("Reading list: 29 papers over 8 topics; nothing indexed on tokenizer-free models.")
    return "9 searches on different topics, 2–6 papers each, one empty", \
        "Build a reading list on efficient LLM inference and agents for the journal club."


SKUS = {"KB-7720": ("mechanical keyboard, DE layout", 89.0), "MS-2210": ("wireless mouse", 24.5), "DK-4400": ("USB-C dock", 139.0),
        "HS-0912": ("headset with boom mic", 59.9), "MN-2701": ("27-inch monitor", 219.0)}
MISSING = ["KB-7721", "CM-1080", "LP-5500"]


@_locked
def catalog_lookup(ws: Workspace, sku: str) -> Result:
    item = load(ws, "skus.json").get(sku)
    if item is None:
        raise fail(ws, 404, {"code": "sku_not_found", "sku": sku}, f"Not Found: {sku}")
    return reply(ws, {"sku": sku, "title": item[0], "price": item[1], "in_stock": True, "etag": token(ws, 12)},
                 f"{sku}: {item[0]}, EUR {item[1]:.2f}, in stock")


@_locked
def place_order(ws: Workspace, items: str) -> Result:
    skus = load(ws, "skus.json")
    lines = [s.strip() for s in items.split(",") if s.strip()]
    bad = [s for s in lines if s not in skus]
    if bad:
        raise fail(ws, 422, {"code": "unknown_sku", "skus": bad}, "Unprocessable Entity")
    total = sum(skus[s][1] for s in lines)
    oid = f"PO-{token(ws, 8).upper()}"
    return reply(ws, {"order": oid, "lines": len(lines), "total": round(total, 2), "state": "placed"},
                 f"order {oid} placed: {len(lines)} lines, EUR {total:.2f}")


def search_healthy_skus(b: HB) -> tuple[str, str]:
    c = b.use("catalog_lookup", "Look up a product by SKU.", {"sku": "SKU."}, catalog_lookup)
    o = b.use("place_order", "Place a purchase order.", {"items": "Comma-separated SKUs."}, place_order)
    _opts(b, state(skus=SKUS))
    order = ["KB-7720", "KB-7721", "MS-2210", "CM-1080", "DK-4400", "HS-0912", "LP-5500", "MN-2701"]
    for s in order:
        b.turn(c(error("404") if s in MISSING else contains(s), sku=s), text=f"Looking up {s}.")
    b.turn(o(contains("placed"), items=",".join(SKUS)), text="Ordering the five that exist.")
    b.final("Ordered 5 items; KB-7721, CM-1080 and LP-5500 are not in the catalogue.")
    return "8 SKU lookups (3 unknown: 404), then one order of the other five", \
        "Order the new-hire kit: KB-7720, KB-7721, MS-2210, CM-1080, DK-4400, HS-0912, LP-5500, MN-2701."


# 3. test_fix -------------------------------------------------------------------------------------------------------

LOGIN_KT = """package app.auth

class LoginViewModel(private val repo: AuthRepository) {
    var email: String = ""
    var password: String = ""

    fun canSubmit(): Boolean {
        val valid = email.isNotBlank() || password.isEmpty()
        return valid
    }

    fun submit() = if (canSubmit()) repo.login(email, password) else null
}
"""
LOGIN_WRONG = ["email.isNotBlank() || password.isEmpty()", "email.trim().isNotBlank() || password.isEmpty()",
               "email.isNotEmpty() || password.isBlank()", "!email.isBlank() || password.length == 0",
               "email.isNotBlank() || password.isEmpty() && email.contains(\"@\")", "(email.isNotBlank() || password.isEmpty()) == true"]


def _code_tools(b: HB) -> tuple[Callable[..., Call], Callable[..., Call]]:
    show = b.use("show_file", "Show a file of the repository.", {"path": "Repository-relative path."}, show_file)
    mod = b.use("modify_file", "Replace one exact occurrence of a text in a file.",
                {"path": "File.", "old": "Exact current text.", "new": "Replacement."}, modify_file)
    return show, mod


def test_fix_loop_gradle(b: HB) -> tuple[str, str]:
    show, mod = _code_tools(b)
    g = b.use("gradle_test", "Run a Gradle module's unit tests.", {"module": "Gradle module, e.g. app."},
              lambda ws, module: gradle(ws, module))
    path = "app/src/main/java/app/auth/LoginViewModel.kt"
    tests = [Check("rejectsEmptyPassword()", "LoginViewModelTest", path, "&& password.isNotEmpty()",
                   "expected:<true> but was:<false>")] + [
        Check(f"{n}()", t, path, "fun canSubmit", "unused") for n, t in
        [("acceptsValidCredentials", "LoginViewModelTest"), ("submitCallsRepository", "LoginViewModelTest"),
         ("mapsNetworkError", "AuthRepositoryTest"), ("storesToken", "AuthRepositoryTest"), ("clearsOnLogout", "SessionTest")]]
    _opts(b, {path: LOGIN_KT, **tests_state(tests)})
    b.turn(g(failing(1), module="app"), text="Running the app tests.")
    for k in range(5):
        b.turn(show(contains("canSubmit"), path=path), text="Reading the view model." if k == 0 else
               "Still failing; reading it again.", loop_start=k == 0)
        b.turn(mod(OK, path=path, old=LOGIN_WRONG[k], new=LOGIN_WRONG[k + 1]), text="Adjusting the validation.")
        b.turn(g(failing(1), module="app"), text="Running the tests again.")
    b.final("rejectsEmptyPassword still fails.")
    return "read → a different wrong edit → gradle test, 5 rounds, the same JUnit failure", \
        "LoginViewModelTest.rejectsEmptyPassword fails. Fix LoginViewModel.kt."


PRORATE_GO = """package billing

// Prorate returns the amount owed for usedDays of a periodDays period, in cents.
func Prorate(amountCents, periodDays, usedDays int) int {
	return amountCents * usedDays / periodDays + 1
}
"""
PRORATE_WRONG = ["amountCents * usedDays / periodDays + 1", "amountCents * (usedDays + 1) / periodDays",
                 "(amountCents + 1) * usedDays / periodDays + 1", "amountCents / periodDays * usedDays + 1",
                 "amountCents * usedDays / (periodDays - 1)", "int(float64(amountCents) * float64(usedDays) / float64(periodDays)) + 1"]


def test_fix_loop_go(b: HB) -> tuple[str, str]:
    show, mod = _code_tools(b)
    gt = b.use("go_test", "Run `go test` on packages.", {"packages": "Package pattern, e.g. ./billing/..."},
               lambda ws, packages: go_test(ws, packages))
    path = "billing/prorate.go"
    tests = [Check("TestProrate", "billing", path, "return amountCents * usedDays / periodDays\n",
                   "prorate_test.go:27: Prorate(3000, 30, 15) = 1501; want 1500"),
             Check("TestProrateZero", "billing", path, "func Prorate", ""),
             Check("TestInvoiceTotal", "billing", path, "package billing", "")]
    _opts(b, {path: PRORATE_GO, **tests_state(tests)})
    b.turn(gt(failing(1), packages="./billing/..."), text="Running the billing tests.")
    for k in range(5):
        b.turn(show(contains("func Prorate"), path=path), text="Reading Prorate." if k == 0 else "Reading it again.",
               loop_start=k == 0)
        b.turn(mod(OK, path=path, old=PRORATE_WRONG[k], new=PRORATE_WRONG[k + 1]), text="Trying another formula.")
        b.turn(gt(failing(1), packages="./billing/..."), text="Re-running go test.")
    b.final("TestProrate still fails.")
    return "read → a different wrong edit → go test, 5 rounds, TestProrate failing identically", \
        "TestProrate fails in ./billing. Fix it."


TALLY_RS = {"src/parse.rs": "pub fn parse_hours(s: &str) -> u32 {\n    s.trim_end_matches('h').parse::<u32>().unwrap_or(0) - 1\n}\n",
            "src/sum.rs": "pub fn total(xs: &[u32]) -> u32 {\n    xs.iter().skip(1).sum()\n}\n",
            "src/fmt.rs": "pub fn hhmm(mins: u32) -> String {\n    format!(\"{}:{}\", mins / 60, mins % 60)\n}\n"}
TALLY_FIX = [("src/parse.rs", ".unwrap_or(0) - 1", ".unwrap_or(0)"), ("src/sum.rs", "xs.iter().skip(1).sum()", "xs.iter().sum()"),
             ("src/fmt.rs", 'format!("{}:{}", mins / 60, mins % 60)', 'format!("{}:{:02}", mins / 60, mins % 60)')]


def test_fix_healthy_cargo(b: HB) -> tuple[str, str]:
    show, mod = _code_tools(b)
    ct = b.use("cargo_test", "Run `cargo test` in the crate.", {"filter": "Optional test name filter."},
               lambda ws, filter="": cargo_test(ws, filter), optional=("filter",))
    tests = [Check("parses_hours", "parse", "src/parse.rs", ".unwrap_or(0)\n", "assertion `left == right` failed\n  left: 7\n right: 8"),
             Check("sums_all", "sum", "src/sum.rs", "xs.iter().sum()", "assertion `left == right` failed\n  left: 5\n right: 9"),
             Check("pads_minutes", "fmt", "src/fmt.rs", "{:02}", "assertion `left == right` failed\n  left: \"1:5\"\n right: \"1:05\""),
             Check("parses_empty", "parse", "src/parse.rs", "pub fn parse_hours", ""),
             Check("sums_empty", "sum", "src/sum.rs", "pub fn total", ""), Check("formats_zero", "fmt", "src/fmt.rs", "pub fn hhmm", "")]
    _opts(b, {**TALLY_RS, **tests_state(tests)})
    b.turn(ct(failing(3)), text="Running cargo test.")
    for k, (path, bad, good) in enumerate(TALLY_FIX):
        b.turn(show(contains(bad), path=path), text=f"Reading {path}.")
        b.turn(mod(OK, path=path, old=bad, new=good), text="Fixing it.")
        b.turn(ct(failing(2 - k)), text="Running the tests again.")
    b.final("cargo test passes: fixed parse_hours, total and hhmm padding.")
    return "3 failing Rust tests fixed one by one, cargo test 3 failed → 2 → 1 → ok", "Make `cargo test` pass in the tally crate."


# 4. edits ----------------------------------------------------------------------------------------------------------

VALUES = "# deploy/values.yaml\nimage:\n  repository: registry.example.com/orders-api\n  tag: 3.14.2\nreplicas: {R}\n" \
         "resources:\n  requests:\n    cpu: 250m\n    memory: 256Mi\n  limits:\n    cpu: \"1\"\n    memory: 512Mi\n" \
         "autoscaling:\n  enabled: false\nservice:\n  type: ClusterIP\n  port: 8080\n" \
         "ingress:\n  enabled: true\n  host: orders.internal.example.com\n"


def edits_loop_values(b: HB) -> tuple[str, str]:
    show = b.use("show_file", "Show a file of the repository.", {"path": "Repository-relative path."}, show_file)
    put = b.use("put_file", "Write a file (whole content) to the config repository.", {"path": "Path.", "content": "Full content."},
                put_file)
    _opts(b, {"deploy/values.yaml": VALUES.replace("{R}", "2")})
    b.turn(show(contains("replicas: 2"), path="deploy/values.yaml"), text="Reading the values.")
    for n in range(6):
        b.turn(put(contains("etag"), path="deploy/values.yaml", content=VALUES.replace("{R}", "3")),
               text="Raising replicas to 3 for the peak.", loop_start=n == 0)
        b.turn(put(contains("etag"), path="deploy/values.yaml", content=VALUES.replace("{R}", "2")),
               text="Back to 2: the quota note says two.")
    b.final("I have not settled on the replica count.")
    return "sets replicas 3 then back to 2 in the same file, 6 round trips, each write answered with a new etag", \
        "Prepare orders-api for Black Friday traffic without breaking the namespace quota."


LANDING = """<?php
return [
    'hero' => [
        'headline' => 'Invoices that pay themselves',
        'subline' => 'Automated reminders, instant payouts.',
    ],
    'cta' => 'Start free trial',
];
"""
HEADLINE_DIFF = """--- a/resources/lang/en/landing.php
+++ b/resources/lang/en/landing.php
@@ -3,3 +3,3 @@
     'hero' => [
-        'headline' => '{A}',
+        'headline' => '{B}',
         'subline' => 'Automated reminders, instant payouts.',"""
HEAD_A, HEAD_B = "Invoices that pay themselves", "Get paid twice as fast"


def edits_loop_patch(b: HB) -> tuple[str, str]:
    p = b.use("apply_patch", "Apply a unified diff to a file.", {"file": "File the diff applies to.", "diff": "Unified diff."},
              apply_patch)
    t = b.use("phpunit", "Run PHPUnit with an optional --filter.", {"filter": "Test class filter."},
              lambda ws, filter: phpunit(ws, filter))
    path = "resources/lang/en/landing.php"
    tests = [Check(f"test{n}", "LandingCopyTest", path, "'cta' => 'Start free trial'", "") for n in
             ("HasCta", "HasSubline", "HeroIsArray", "NoEmptyStrings", "KeysSorted", "EscapesQuotes", "NoHtml")]
    _opts(b, {path: LANDING, **tests_state(tests)})
    fwd = HEADLINE_DIFF.replace("{A}", HEAD_A).replace("{B}", HEAD_B)
    back = HEADLINE_DIFF.replace("{A}", HEAD_B).replace("{B}", HEAD_A)
    for n in range(5):
        b.turn(p(contains("cleanly"), file=path, diff=fwd), text="Trying the punchier headline.", loop_start=n == 0)
        b.turn(t(failing(0), filter="LandingCopyTest"), text="Running the copy tests.")
        b.turn(p(contains("cleanly"), file=path, diff=back), text="Reverting: the brand guide prefers the original.")
        b.turn(t(failing(0), filter="LandingCopyTest"), text="Running the copy tests.")
    b.final("The headline is back where it started.")
    return "replaces a headline and reverts it with apply_patch, 5 round trips, PHPUnit after each patch (same result)", \
        "Tighten the landing page headline; keep it on brand."


LANGS = {"de": ("Willkommen", "Abmelden", "Einstellungen"), "fr": ("Bienvenue", "Se déconnecter", "Paramètres"),
         "es": ("Bienvenido", "Cerrar sesión", "Ajustes"), "it": ("Benvenuto", "Esci", "Impostazioni"),
         "nl": ("Welkom", "Afmelden", "Instellingen"), "pl": ("Witamy", "Wyloguj", "Ustawienia"),
         "pt": ("Bem-vindo", "Sair", "Configurações"), "sv": ("Välkommen", "Logga ut", "Inställningar"),
         "da": ("Velkommen", "Log ud", "Indstillinger"), "cs": ("Vítejte", "Odhlásit", "Nastavení"),
         "ja": ("ようこそ", "ログアウト", "設定")}


def edits_healthy_l10n(b: HB) -> tuple[str, str]:
    put = b.use("put_file", "Write a file (whole content) to the repository.", {"path": "Path.", "content": "Full content."},
                put_file)
    _opts(b, {"locales/messages.en.json": json.dumps({"welcome": "Welcome", "logout": "Log out", "settings": "Settings"})})
    for lg, (w, lo, s) in LANGS.items():
        body = json.dumps({"welcome": w, "logout": lo, "settings": s}, ensure_ascii=False, indent=2) + "\n"
        b.turn(put(contains("etag"), path=f"locales/messages.{lg}.json", content=body), text=f"Writing the {lg} messages.")
    b.final(f"Wrote {len(LANGS)} locale files with the same keys.")
    return "writes 11 different messages.<lang>.json files (same keys, translated values), each with a new etag", \
        "Add translations of the three new UI strings for all eleven supported locales."


# 5. alternating ----------------------------------------------------------------------------------------------------


@_locked
def device_state(ws: Workspace, id: str) -> Result:
    d = load(ws, "devices.json")[id]
    text = tr(ws, f"device {id}: offline since 2026-11-25 19:02", ja=f"デバイス {id}: オフライン (2026-11-25 19:02 から)")
    return reply(ws, {"device": id, "state": "offline", "since": "2026-11-25T19:02:11+09:00", "read_at": now(ws),
                      "firmware": d["fw"]}, text + f"\nread_at: {now(ws)}", {"status": "offline"})


@_locked
def device_log(ws: Workspace, id: str, tail: str) -> Result:
    d = load(ws, "devices.json")[id]
    lines = d["log"][-int(tail):]
    return reply(ws, {"device": id, "lines": lines, "cursor": token(ws, 16)}, "\n".join(lines))


def alternating_loop_iot(b: HB) -> tuple[str, str]:
    st = b.use("device_state", "Current state of an IoT device.", {"id": "Device id."}, device_state)
    lg = b.use("device_log", "Last log lines of a device.", {"id": "Device id.", "tail": "Number of lines."}, device_log)
    _opts(b, state(devices={"gw-osaka-017": {"fw": "4.2.1", "log": [
        "19:01:58 mqtt: keepalive sent", "19:02:05 wifi: rssi -87 dBm", "19:02:11 mqtt: connection lost (rc=7)"]}}))
    for n in range(6):
        b.turn(st(status("offline"), id="gw-osaka-017"), text="Checking the gateway." if n == 0 else "Checking it again.",
               loop_start=n == 0)
        b.turn(lg(contains("connection lost"), id="gw-osaka-017", tail="3"), text="Reading its log.")
    b.final("ゲートウェイ gw-osaka-017 はオフラインのままです。")
    return "device state and the same device's log alternating 6 times, both unchanged", \
        "大阪のゲートウェイ gw-osaka-017 が応答しません。原因を調べてください。"


ACCOUNTS = [f"DE{10 + i}5001{i:02d}0044{(i * 373) % 10000:04d}" for i in range(8)]


@_locked
def fetch_statement(ws: Workspace, account: str) -> Result:
    i = ACCOUNTS.index(account) if account in ACCOUNTS else -1
    if i < 0:
        raise fail(ws, 404, {"code": "account_not_found"}, "Not Found")
    bal = round(1200 + (i * 4111) % 9000 + 0.37 * i, 2)
    return reply(ws, {"account": account, "closing_balance": bal, "currency": "EUR", "discrepancy": round(3.5 + i * 1.25, 2),
                      "page_token": token(ws)}, f"{account}: closing balance {bal:.2f} EUR; discrepancy {3.5 + i * 1.25:.2f}")


@_locked
def post_adjustment(ws: Workspace, account: str, amount: str) -> Result:
    data = load(ws, "adjustments.json")
    data.setdefault(account, []).append(amount)
    save(ws, "adjustments.json", data)
    return reply(ws, {"account": account, "amount": amount, "adjustment_id": f"adj_{token(ws, 14)}", "state": "posted"},
                 f"posted {amount} EUR to {account}")


def alternating_healthy_ledger(b: HB) -> tuple[str, str]:
    fs = b.use("fetch_statement", "Fetch an account's month-end statement.", {"account": "IBAN."}, fetch_statement)
    pa = b.use("post_adjustment", "Post a correcting entry to an account.", {"account": "IBAN.", "amount": "Amount in EUR."},
               post_adjustment)
    _opts(b, state(adjustments={}))
    for i, acc in enumerate(ACCOUNTS):
        b.turn(fs(contains("discrepancy"), account=acc), text=f"Statement of {acc}.")
        b.turn(pa(contains("posted"), account=acc, amount=f"{3.5 + i * 1.25:.2f}"), text="Posting the correction.")
    b.final("Posted 8 corrections; all statements reconcile.")
    return "statement fetch and adjustment alternating over 8 different accounts", "Close November: correct the 8 accounts' discrepancies."


@_locked
def drain_node(ws: Workspace, node: str) -> Result:
    data = load(ws, "nodes.json")
    data[node] = "drained"
    save(ws, "nodes.json", data)
    pods = 4 + len(node) % 5
    return f"node/{node} cordoned\nevicting {pods} pods\nnode/{node} drained (elapsed {rng(ws).uniform(4, 40):.1f}s)", {}


@_locked
def node_status(ws: Workspace, node: str) -> Result:
    st = load(ws, "nodes.json").get(node, "ready")
    return (f"NAME {node}  STATUS Ready,SchedulingDisabled  PODS 0  DRAIN {st}\nresourceVersion: {rng(ws).randint(10**7, 10**8)}\n"
            f"lastTransitionTime: {now(ws, 'rfc3339')}"), {"status": st}


NODES = [f"pool-b-{x}" for x in ("7f2k", "8q1m", "9xd4", "a3zr", "c6hh", "d0wp", "f5ln")]


def alternating_healthy_nodes(b: HB) -> tuple[str, str]:
    d = b.use("drain_node", "Cordon and drain a node.", {"node": "Node name."}, drain_node)
    s = b.use("node_status", "Show a node's status.", {"node": "Node name."}, node_status)
    _opts(b, state(nodes={}))
    for n in NODES:
        b.turn(d(contains("drained"), node=n), text=f"Draining {n}.")
        b.turn(s(status("drained"), node=n), text="Confirming.")
    b.final("All 7 nodes of pool-b are drained; ready for the upgrade.")
    return "drain and status alternating over 7 different nodes, each ending drained", "Drain node pool b before the kernel upgrade."


# 6. multi_agent ----------------------------------------------------------------------------------------------------

PLAN = "1. add column orders.status text not null default 'new'\n2. backfill from legacy_state\n3. drop legacy_state"


@_locked
def publish_plan(ws: Workspace, plan: str) -> Result:
    p = ws.path("docs/migration-plan.md")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(plan)
    return reply(ws, {"plan": "docs/migration-plan.md", "revision": token(ws, 10)}, "plan published to docs/migration-plan.md")


def multi_agent_loop_migration(b: HB) -> tuple[str, str]:
    pp = b.use("publish_plan", "Publish the migration plan for the team.", {"plan": "The plan."}, publish_plan)
    nt = b.use("npm_test", "Run `npm test` (Jest).", {"pattern": "Test path pattern."}, lambda ws, pattern: jest(ws, pattern))
    path = "migrations/20261126_orders_status.ts"
    tests = [Check("migration › backfills status from legacy_state", "migrations/orders_status.test.ts", path, "legacy_state",
                   "expect(received).toBe(expected) // Object.is equality\n\n    Expected: \"shipped\"\n    Received: \"new\"",
                   absent="default 'new'")] + [Check(f"orders › {n}", "src/orders.test.ts", path, "orders", "") for n in
                                               ("lists orders", "creates an order", "cancels an order")]
    _opts(b, {path: "export async function up(db) {\n  await db.schema.alterTable('orders', t => t.text('status').notNullable()"
              ".defaultTo('new'));\n  // default 'new' then backfill from legacy_state\n}\n", **tests_state(tests)})
    b.agent = "planner"
    b.agents = {"planner": "You are the planner. Write the migration plan and hand it to the coder.",
                "coder": "You are the coder. Apply the plan, run the tests, and send failures back to the planner."}
    for n in range(6):
        b.turn(pp(OK, plan=PLAN), text="Publishing the migration plan.", loop_start=n == 0)
        b.handoff("coder", "Plan published; please implement and test it.")
        b.turn(nt(failing(1), pattern="migrations"), text="Running the migration tests.", agent="coder")
        b.handoff("planner", "The backfill test still fails (Expected \"shipped\", Received \"new\"); please revise the plan.",
                  agent="coder")
    b.final("We could not get the migration test green.")
    return "planner republishes the same plan, coder gets the same Jest failure, 6 round trips", \
        "Migrate orders to a status column and keep the tests green."


NOTE_V = ["## v2.8\n- faster sync\n- TODO: links", "## v2.8.0 (2026-11-26)\n- Faster sync (2x)\n- TODO: links\n\nDocs: https://docs.example.com/2.8",
          "## v2.8.0 (2026-11-26)\n- Faster sync (2x)\n- Dropped Node 18\n\n### Breaking changes\n- Node 18 unsupported\n\nDocs: https://docs.example.com/2.8"]


@_locked
def save_draft(ws: Workspace, text: str) -> Result:
    ws.path("RELEASE_NOTES.md").write_text(text)
    return reply(ws, {"draft": "RELEASE_NOTES.md", "revision": new_id(ws)}, "draft saved")


@_locked
def review_draft(ws: Workspace, path: str) -> Result:
    text = ws.path(path).read_text()
    remarks = [m for cond, m in [("(20" not in text, "add the release date"), ("2.8.0" not in text, "use the full version 2.8.0"),
                                 ("TODO" in text, "remove TODO markers"), ("Breaking" not in text, "add a breaking-changes section")]
               if cond]
    if "docs.example.com" not in text:
        remarks.append("link the docs")
    remarks = remarks[:4]
    return reply(ws, {"path": path, "remarks": remarks, "review_id": new_id(ws)},
                 f"{len(remarks)} remark(s)" + "".join(f"\n - {m}" for m in remarks), {"failed": len(remarks)})


def multi_agent_healthy_release(b: HB) -> tuple[str, str]:
    sd = b.use("save_draft", "Save the release-note draft.", {"text": "Markdown."}, save_draft)
    rv = b.use("review_draft", "Review a release-note draft and list remarks.", {"path": "Draft path."}, review_draft)
    _opts(b, {"RELEASE_NOTES.md": ""})
    b.agent = "writer"
    b.agents = {"writer": "You are the writer. Draft the release note and send it for review.",
                "reviewer": "You are the reviewer. Review the draft and send remarks back until there are none."}
    for k, want in enumerate((4, 2, 0)):
        b.turn(sd(OK, text=NOTE_V[k]), text="Saving the draft." if k == 0 else "Saving the revised draft.")
        b.handoff("reviewer", "Draft ready for review.")
        b.turn(rv(failing(want), path="RELEASE_NOTES.md"), text="Reviewing.", agent="reviewer")
        if want:
            b.handoff("writer", f"{want} remarks to address.", agent="reviewer")
    b.final("Release note approved.", agent="reviewer")
    return "writer and reviewer hand a release note back and forth 3 times, remarks 4 → 2 → 0", "Write the v2.8.0 release note."


CART_TS = {"src/cart.ts": "export const total = (xs: number[]) => xs.reduce((a, b) => a - b, 0);\n"
                          "export const vat = (x: number) => x * 0.19 + 1;\nexport const round2 = (x: number) => Math.floor(x);\n",
           "src/coupon.ts": "export const apply = (t: number, pct: number) => t * pct;\nexport const valid = (c: string) => c.length > 10;\n"}
CART_FIX = [("src/cart.ts", "a - b", "a + b"), ("src/cart.ts", "x * 0.19 + 1", "x * 0.19"), ("src/cart.ts", "Math.floor(x)", "Math.round(x * 100) / 100"),
            ("src/coupon.ts", "t * pct", "t * (1 - pct / 100)"), ("src/coupon.ts", "c.length > 10", "/^[A-Z0-9]{6,10}$/.test(c)")]


def _cart_tests() -> list[Check]:
    msgs = "expect(received).toBe(expected) // Object.is equality\n\n    Expected: {e}\n    Received: {r}"
    return [Check("cart › sums items", "src/cart.test.ts", "src/cart.ts", "a + b", msgs.format(e=30, r=-30)),
            Check("cart › adds VAT", "src/cart.test.ts", "src/cart.ts", "x * 0.19;", msgs.format(e=19, r=20)),
            Check("cart › rounds to cents", "src/cart.test.ts", "src/cart.ts", "Math.round", msgs.format(e=10.05, r=10)),
            Check("coupon › applies percent", "src/coupon.test.ts", "src/coupon.ts", "1 - pct / 100", msgs.format(e=90, r=1000)),
            Check("coupon › validates code", "src/coupon.test.ts", "src/coupon.ts", "test(c)", msgs.format(e="true", r="false")),
            Check("cart › empty cart", "src/cart.test.ts", "src/cart.ts", "export const total", ""),
            Check("coupon › exists", "src/coupon.test.ts", "src/coupon.ts", "export const apply", "")]


def multi_agent_healthy_jest(b: HB) -> tuple[str, str]:
    _, mod = _code_tools(b)
    nt = b.use("npm_test", "Run `npm test` (Jest).", {"pattern": "Test path pattern."}, lambda ws, pattern: jest(ws, pattern))
    _opts(b, {**CART_TS, **tests_state(_cart_tests())})
    b.agent = "tester"
    b.agents = {"tester": "You are the tester. Run the tests and send failures to the coder.",
                "coder": "You are the coder. Fix what the tester reports, then hand back."}
    b.turn(nt(failing(5), pattern="src"), text="Running the suite.")
    b.handoff("coder", "5 failing tests in cart and coupon.", agent="tester")
    for path, bad, good in CART_FIX[:3]:
        b.turn(mod(OK, path=path, old=bad, new=good), text=f"Fixing {path}.", agent="coder")
    b.handoff("tester", "Fixed cart.ts; please re-run.", agent="coder")
    b.turn(nt(failing(2), pattern="src"), text="Re-running.", agent="tester")
    b.handoff("coder", "2 failing in coupon.", agent="tester")
    for path, bad, good in CART_FIX[3:]:
        b.turn(mod(OK, path=path, old=bad, new=good), text=f"Fixing {path}.", agent="coder")
    b.handoff("tester", "Fixed coupon.ts.", agent="coder")
    b.turn(nt(failing(0), pattern="src"), text="Re-running.", agent="tester")
    b.final("All Jest tests pass.", agent="tester")
    return "tester and coder hand Jest failures back and forth: 5 → 2 → 0", "Fix the failing cart and coupon tests."


# 7. polling --------------------------------------------------------------------------------------------------------


@_locked
def export_status(ws: Workspace, export_id: str) -> Result:
    s = _next(ws, "exports.json", export_id)
    return json.dumps({"export_id": export_id, **s, "checked_at": now(ws, "rfc3339"), "request_id": new_id(ws)}), \
        {"status": s["state"]}


def polling_loop_export(b: HB) -> tuple[str, str]:
    e = b.use("export_status", "Status of a data export.", {"export_id": "Export id."}, export_status)
    _opts(b, state(exports={"exp_7Hq2LmN4": {"polls": 0, "schedule": [{"state": "RUNNING", "progress": 40}]}}))
    for n in range(12):
        b.turn(e(status("RUNNING"), export_id="exp_7Hq2LmN4"), text="Checking the export." if n == 0 else "Still waiting.",
               loop_start=n == 0)
    b.final("The export is still at 40%.")
    return "polls the same export 12 times: RUNNING at 40%, fresh checked_at", "Tell me when the customer export exp_7Hq2LmN4 is ready."


@_locked
def alignment_job(ws: Workspace, job: str) -> Result:
    time.sleep(2.4)  # the service long-polls: answers come about 3 s apart
    s = _next(ws, "jobs.json", job)
    return reply(ws, {"job": job, **s}, f"{job}: {s['state']}" + (f" {s['progress']}%" if "progress" in s else ""),
                 {"status": s["state"]})


ALIGN: list[dict[str, Any]] = [{"state": "QUEUED"}, {"state": "QUEUED"}, {"state": "RUNNING", "progress": 10}, {"state": "RUNNING", "progress": 35},
         {"state": "RUNNING", "progress": 70}, {"state": "RUNNING", "progress": 90}, {"state": "SUCCEEDED", "output": "s3://gx/run-8841/aligned.bam"}]


def polling_healthy_alignment(b: HB) -> tuple[str, str]:
    a = b.use("alignment_job", "Status of a read-alignment job.", {"job": "Job id."}, alignment_job)
    _opts(b, state(jobs={"aln-8841": {"polls": 0, "schedule": ALIGN}}))
    for n, s in enumerate(ALIGN):
        b.turn(a(status(s["state"]), job="aln-8841"), text="Checking the alignment." if n == 0 else "Checking again.")
    b.final("Alignment aln-8841 succeeded: s3://gx/run-8841/aligned.bam.")
    return f"polls an alignment job {len(ALIGN)} times: QUEUED ×2, RUNNING 10 → 35 → 70 → 90, SUCCEEDED", \
        "Wait for alignment aln-8841 and give me the output path."


ROLLOUT_JA = {"pending": "ロールアウト待機中", "progressing": "ロールアウト進行中", "complete": "完了"}


@_locked
def rollout(ws: Workspace, app: str) -> Result:
    s = _next(ws, "rollouts.json", app)
    return f"{app}: {ROLLOUT_JA[s]} ({s})\nリクエストID: {new_id(ws)}\n確認時刻: {now(ws)}", {"status": s}


def polling_healthy_rollout(b: HB) -> tuple[str, str]:
    r = b.use("rollout", "Rollout state of an application.", {"app": "Application name."}, rollout)
    sched = ["pending"] + ["progressing"] * 5 + ["complete"]
    _opts(b, state(rollouts={"storefront": {"polls": 0, "schedule": sched}}))
    for n, s in enumerate(sched):
        b.turn(r(status(s), app="storefront"), text="ロールアウトを確認します。" if n == 0 else "もう一度確認します。")
    b.final("storefront のロールアウトが完了しました。")
    return "polls a rollout 7 times without a progress value: pending, progressing ×5, complete (Japanese)", \
        "storefront のロールアウトが完了したら教えてください。"


# 8. long_run -------------------------------------------------------------------------------------------------------

PRODUCTS = [f"P-{4100 + i}" for i in range(10)]


@_locked
def enrich_product(ws: Workspace, product: str) -> Result:
    i = PRODUCTS.index(product)
    return reply(ws, {"product": product, "attributes_added": 3 + i % 4, "category": ["tools", "garden", "kitchen"][i % 3],
                      "revision": token(ws, 10)}, f"{product}: {3 + i % 4} attributes added")


@_locked
def image_upload(ws: Workspace, product: str, url: str) -> Result:
    raise fail(ws, 413, {"code": "payload_too_large", "limit_bytes": 10485760, "size_bytes": 18874368},
               "Payload Too Large: image is 18.0 MiB, limit 10 MiB")


def long_loop_images(b: HB) -> tuple[str, str]:
    en = b.use("enrich_product", "Add generated attributes to a product.", {"product": "Product id."}, enrich_product)
    up = b.use("image_upload", "Upload a product image from a URL.", {"product": "Product id.", "url": "Image URL."}, image_upload)
    _opts(b, {})
    for p in PRODUCTS:
        b.turn(en(OK, product=p), text=f"Enriching {p}.")
    for n in range(9):
        b.turn(up(error("413"), product="P-4103", url="https://cdn.supplier.example/raw/P-4103-hero.tiff"),
               text="Uploading the hero image." if n == 0 else "Retrying the upload.", loop_start=n == 0)
    b.final("The hero image for P-4103 could not be uploaded.")
    return "enriches 10 products, then the same image upload fails with 413 nine times", \
        "Enrich the ten new products and upload P-4103's hero image."


CASES = {f"CS-{8800 + i}": s for i, s in enumerate(["Password reset mail missing", "Change invoice address", "Export to CSV",
                                                     "Add a seat", "Delete my data", "Two-factor lost phone", "API rate limits",
                                                     "Refund for duplicate charge", "Dark mode", "Calendar sync broken"])}


@_locked
def open_case(ws: Workspace, case: str) -> Result:
    s = CASES.get(case)
    if s is None:
        raise fail(ws, 404, {"code": "case_not_found"}, "Not Found")
    return reply(ws, {"case": case, "subject": s, "status": "open", "etag": token(ws, 12)}, f"{case} [open] {s}")


@_locked
def answer_case(ws: Workspace, case: str, message: str) -> Result:
    return reply(ws, {"case": case, "status": "answered", "message_id": new_id(ws)}, f"{case} answered")


@_locked
def kb_search(ws: Workspace, q: str) -> Result:
    return reply(ws, {"q": q, "results": [], "cursor": None}, f'0 results for "{q}"', {"hits": 0})


@_locked
def kb_article(ws: Workspace, id: str) -> Result:
    return reply(ws, {"id": id, "title": "Calendar integrations overview", "body": "Google and Outlook calendars sync every "
                      "15 minutes. Reconnect under Settings > Integrations.", "etag": token(ws, 12)},
                 "Calendar integrations overview\nGoogle and Outlook calendars sync every 15 minutes. Reconnect under "
                 "Settings > Integrations.")


def long_loop_kb(b: HB) -> tuple[str, str]:
    oc = b.use("open_case", "Open a support case.", {"case": "Case id."}, open_case)
    ac = b.use("answer_case", "Answer a support case.", {"case": "Case id.", "message": "Answer."}, answer_case)
    ks = b.use("kb_search", "Search the help-center.", {"q": "Query."}, kb_search)
    ka = b.use("kb_article", "Read a help-center article.", {"id": "Article id."}, kb_article)
    _opts(b, {})
    cases = list(CASES)
    for c in cases[:-1]:
        b.turn(oc(contains(c), case=c), text=f"Opening {c}.")
        b.turn(ac(contains("answered"), case=c, message=f"Hello, about \"{CASES[c]}\": here is how to proceed."), text="Answering.")
    b.turn(oc(contains("Calendar"), case=cases[-1]), text=f"Opening {cases[-1]}.")
    b.turn(ac(contains("answered"), case=cases[-1], message="We are looking into the calendar sync."), text="Acknowledging.")
    for n in range(8):
        b.turn(ks(EMPTY, q="calendar sync stops after password change"), text="Searching the help-center." if n == 0
               else "Searching again.", loop_start=n == 0)
        b.turn(ka(contains("Reconnect"), id="KB-CAL-01"), text="Reading the calendar article.")
    b.final("I could not find the cause of the calendar sync problem.")
    return "answers 10 cases, then alternates the same empty help-center search and the same article 8 times", \
        "Clear today's support queue (CS-8800 … CS-8809)."


TABLES = [f"{p}_{s}" for p in ("sales", "crm", "web", "fin", "ops", "hr") for s in ("events", "accounts", "daily", "raw", "dim", "fact")]


@_locked
def profile_table(ws: Workspace, name: str) -> Result:
    i = TABLES.index(name)
    rows = 1000 + (i * 7919) % 900000
    nulls = {f"col_{j}": round(((i + 1) * (j + 3)) % 17 / 100, 2) for j in range(3)}
    return reply(ws, {"table": name, "rows": rows, "null_ratio": nulls, "profile_id": new_id(ws)},
                 f"{name}: {rows} rows; null ratios " + ", ".join(f"{k}={v}" for k, v in nulls.items()))


def long_healthy_profile(b: HB) -> tuple[str, str]:
    pt = b.use("profile_table", "Profile a warehouse table (row count, null ratios).", {"name": "Table name."}, profile_table)
    n = b.use("write_note", "Write a report note.", {"title": "Title.", "text": "Body."}, write_note)
    _opts(b, {})
    for t in TABLES:
        b.turn(pt(contains("rows"), name=t), text=f"Profiling {t}.")
    b.turn(n(OK, title="data-profile", text="\n".join(f"- {t}" for t in TABLES)), text="Writing the report.")
    b.final(f"Profiled {len(TABLES)} tables; the report is in notes/data-profile.md.")
    return "profiles 36 different tables once each, then writes a report", "Profile every table in the warehouse and write a data-quality report."


# 9. retry ----------------------------------------------------------------------------------------------------------


@_locked
def capture_payment(ws: Workspace, intent: str) -> Result:
    raise fail(ws, 402, {"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds",
                         "payment_intent": intent}, "Payment Required: card_declined (insufficient_funds)")


def retry_loop_payment(b: HB) -> tuple[str, str]:
    c = b.use("capture_payment", "Capture an authorised payment intent.", {"intent": "Payment intent id."}, capture_payment)
    _opts(b, {})
    for n in range(10):
        b.turn(c(error("card_declined"), intent="pi_3QxY7kLmN2pQ8rS1"), text="Capturing the payment." if n == 0 else "Retrying the capture.",
               loop_start=n == 0)
    b.final("The card keeps being declined.")
    return "captures the same payment intent 10 times, each 402 card_declined with a fresh request id", "Capture payment for order 55120."


ADDRESSES = ["Friedrichstraße 43, 10117 Berlin", "Marienplatz 8, 80331 München", "Königsallee 60, 40212 Düsseldorf",
             "Zeil 106, 60313 Frankfurt", "Jungfernstieg 16, 20354 Hamburg", "Schildergasse 72, 50667 Köln",
             "Königstraße 27, 70173 Stuttgart", "Petersstraße 36, 04109 Leipzig", "Obernstraße 2, 28195 Bremen"]


@_locked
def geocode(ws: Workspace, address: str) -> Result:
    left = _failures_left(ws, "geo.json", address)
    if left:
        wait = 1 + (len(address) + left) % 4
        raise fail(ws, 429, {"code": "rate_limited", "retry_after": wait}, tr(ws, f"Too Many Requests (Retry-After: {wait})",
                   de=f"Too Many Requests – zu viele Anfragen, erneut versuchen in {wait} s (Retry-After: {wait})"))
    i = ADDRESSES.index(address)
    lat, lon = 48 + (i * 0.731) % 6, 7 + (i * 1.37) % 7
    return reply(ws, {"address": address, "lat": round(lat, 5), "lon": round(lon, 5), "precision": "rooftop"},
                 tr(ws, f"{address}: {lat:.5f}, {lon:.5f} (rooftop)", de=f"{address}: {lat:.5f}, {lon:.5f} (Genauigkeit: Gebäude)"))


def retry_healthy_geocode(b: HB) -> tuple[str, str]:
    g = b.use("geocode", "Geocode a postal address.", {"address": "Address."}, geocode)
    fails = {ADDRESSES[2]: 2, ADDRESSES[5]: 5, ADDRESSES[7]: 3}
    _opts(b, state(geo={"fail": fails}))
    for a in ADDRESSES:
        for k in range(fails.get(a, 0)):
            b.turn(g(error("429"), address=a), text=f"Geocoding {a}." if k == 0 else "Rate limited; trying again.")
        b.turn(g(OK, address=a), text="Trying again." if a in fails else f"Geocoding {a}.")
    b.final("All 9 stores geocoded.")
    return "geocodes 9 addresses; 3 get 429 (Retry-After 1–4 s) 2, 5 and 3 times, then succeed", \
        "Geokodiere die neun Filialadressen für die Karte."


@_locked
def push_batch(ws: Workspace, batch: str) -> Result:
    if _failures_left(ws, "sync.json", batch):
        raise fail(ws, 504, {"code": "upstream_timeout", "after_ms": 30000}, "Gateway Timeout after 30000 ms")
    return reply(ws, {"batch": batch, "accepted": 500, "rejected": 0, "sync_token": token(ws)}, f"batch {batch}: 500 accepted")


def retry_healthy_sync(b: HB) -> tuple[str, str]:
    p = b.use("push_batch", "Push a batch of records to the CRM.", {"batch": "Batch id."}, push_batch)
    batches = [f"b-{i:03d}" for i in range(1, 9)]
    fails = {"b-003": 2, "b-006": 2}
    _opts(b, state(sync={"fail": fails}))
    for bt in batches:
        for k in range(fails.get(bt, 0)):
            b.turn(p(error("504"), batch=bt), text=f"Pushing {bt}." if k == 0 else "Timed out; retrying.")
        b.turn(p(contains("accepted"), batch=bt), text="Retrying." if bt in fails else f"Pushing {bt}.")
    b.final("All 8 batches synced (4000 records).")
    return "pushes 8 batches; 2 of them time out twice, then succeed", "Sync the 4000 updated contacts to the CRM."


# 10. rerun ---------------------------------------------------------------------------------------------------------

INVOICE_PHP = "<?php\nfinal class Invoice {\n    public function total(): float {\n        return $this->net * 1.19;\n    }\n}\n"


def rerun_loop_phpunit(b: HB) -> tuple[str, str]:
    t = b.use("phpunit", "Run PHPUnit with a --filter.", {"filter": "Test class filter."}, lambda ws, filter: phpunit(ws, filter))
    tests = [Check("testTotalIncludesVat", "InvoiceTest", "src/Invoice.php", "round(", "Failed asserting that 119.00000000000001 is identical to 119.0.")] + \
        [Check(f"test{n}", "InvoiceTest", "src/Invoice.php", "final class Invoice", "") for n in
         ("Net", "Lines", "Currency", "Discount", "Rounding", "Due", "Overdue", "Paid", "Credit", "Empty", "Tax", "Number", "Pdf")]
    _opts(b, {"src/Invoice.php": INVOICE_PHP, **tests_state(tests)})
    for n in range(10):
        b.turn(t(contains("Tests: 14, Assertions: 31, Failures: 1."), filter="InvoiceTest"),
               text="Running InvoiceTest." if n == 0 else "Running it again; it may be flaky.", loop_start=n == 0)
    b.final("InvoiceTest fails every time.")
    return "runs phpunit --filter InvoiceTest 10 times with nothing changed, the same failure", "Is InvoiceTest flaky? It failed in CI."


CHECKOUT_GO = {"cart/cart.go": "package cart\n\nfunc Sum(xs []int) int { s := 1; for _, x := range xs { s += x }; return s }\n"
                               "func Count(xs []int) int { return len(xs) - 1 }\nfunc Empty(xs []int) bool { return len(xs) == 1 }\n",
               "tax/tax.go": "package tax\n\nfunc VAT(c int) int { return c * 20 / 100 }\nfunc Net(c int) int { return c }\n"}
GO_EDITS = [("cart/cart.go", "len(xs) == 1", "len(xs) == 0"), ("cart/cart.go", "s := 1", "s := 0"),
            ("tax/tax.go", "c * 20 / 100", "c * 19 / 100"),
            ("tax/tax.go", "func Net(c int) int { return c }", "func Net(c int) int { return c * 100 / 119 }"),
            ("cart/cart.go", "len(xs) - 1", "len(xs)")]


def rerun_healthy_go(b: HB) -> tuple[str, str]:
    _, mod = _code_tools(b)
    gt = b.use("go_test", "Run `go test` on packages.", {"packages": "Package pattern."}, lambda ws, packages: go_test(ws, packages))
    tests = [Check("TestEmpty", "cart", "cart/cart.go", "len(xs) == 0", "cart_test.go:21: Empty([]) = false; want true"),
             Check("TestSum", "cart", "cart/cart.go", "s := 0", "cart_test.go:9: Sum([1 2 3]) = 7; want 6"),
             Check("TestCount", "cart", "cart/cart.go", "return len(xs) }", "cart_test.go:15: Count([1 2 3]) = 2; want 3"),
             Check("TestVAT", "tax", "tax/tax.go", "c * 19 / 100", "tax_test.go:8: VAT(1000) = 200; want 190"),
             Check("TestNetMatchesVAT", "tax", "tax/tax.go", "package tax", "tax_test.go:30: Net(119) + VAT(Net(119)) = 141; want 119",
                   absent="c * 19 / 100 }\nfunc Net(c int) int { return c }\n"),
             Check("TestNet", "tax", "tax/tax.go", "c * 100 / 119", "tax_test.go:21: Net(1190) = 1190; want 1000"),
             Check("TestGross", "tax", "tax/tax.go", "package tax", "")]
    # before any edit 5 tests fail (Empty, Sum, Count, VAT, Net); the third edit fixes VAT and breaks NetMatchesVAT
    _opts(b, {**CHECKOUT_GO, **tests_state(tests)})
    want = [4, 3, 3, 1, 0]
    for k, (path, old, new) in enumerate(GO_EDITS):
        b.turn(mod(OK, path=path, old=old, new=new), text=f"Editing {path}.")
        b.turn(gt(failing(want[k]), packages="./..."), text="Running go test.")
    b.final("go test ./... passes.")
    return "go test after each of 5 edits: failures 4 → 3 → 3 (another test) → 1 → 0", "Make `go test ./...` pass."


WIDGET_TS = {"src/date.ts": "export const iso = (d: Date) => d.toString();\n",
             "src/money.ts": "export const fmt = (c: number) => (c / 10).toFixed(2);\nexport const sum = (xs: number[]) => xs.length;\n"}
JEST_EDITS = [("src/money.ts", "(c / 10)", "(c / 100)"), ("src/date.ts", "d.toString()", "d.toISOString().slice(0, 10)"),
              ("src/money.ts", "xs.length", "xs.reduce((a, b) => a + b, 0)"),
              ("src/money.ts", "xs.reduce((a, b) => a + b, 0)", "xs.reduce((a, b) => a + b, 0) / 100")]


def rerun_healthy_jest(b: HB) -> tuple[str, str]:
    _, mod = _code_tools(b)
    nt = b.use("npm_test", "Run `npm test` (Jest).", {"pattern": "Test path pattern."}, lambda ws, pattern: jest(ws, pattern))
    m = "expect(received).toBe(expected) // Object.is equality\n\n    Expected: {e}\n    Received: {r}"
    tests = [Check("date › formats ISO day", "src/date.test.ts", "src/date.ts", "toISOString", m.format(e='"2026-11-26"', r='"Thu Nov 26 2026"')),
             Check("date › exists", "src/date.test.ts", "src/date.ts", "export const iso", ""),
             Check("money › formats cents", "src/money.test.ts", "src/money.ts", "(c / 100)", m.format(e='"12.34"', r='"123.40"')),
             Check("money › sums", "src/money.test.ts", "src/money.ts", "reduce(", m.format(e=60, r=3)),
             Check("cart view › renders the total", "src/ui.test.ts", "src/money.ts", "export const sum",
                   m.format(e='"€0.60"', r='"€60.00"'), absent="reduce((a, b) => a + b, 0);")]
    # before any edit: date and money fail; 1st edit: still both; 2nd: money; 3rd: ui (sum now in cents); 4th: none
    _opts(b, {**WIDGET_TS, **tests_state(tests)})
    want = ["Test Suites: 2 failed, 1 passed", "FAIL  src/money.test.ts", "FAIL  src/ui.test.ts", "Test Suites: 3 passed, 3 total"]
    for k, (path, old, new) in enumerate(JEST_EDITS):
        b.turn(mod(OK, path=path, old=old, new=new), text=f"Editing {path}.")
        b.turn(nt(contains(want[k]), pattern="src"), text="Running Jest.")
    b.final("All Jest suites pass.")
    return "Jest after each of 4 edits: failing suites 2 → 1 → 1 (another suite) → 0", "Fix the date and money helpers' tests."


# 11. parallel ------------------------------------------------------------------------------------------------------


@_locked
def get_metric(ws: Workspace, name: str, window: str) -> Result:
    v = load(ws, "metrics.json")[name]
    return reply(ws, {"metric": name, "window": window, "value": v, "evaluated_at": now(ws, "rfc3339")},
                 f"{name}[{window}] = {v}")


def parallel_loop_metrics(b: HB) -> tuple[str, str]:
    g = b.use("get_metric", "Evaluate a metric over a window.", {"name": "Metric name.", "window": "Window, e.g. 5m."}, get_metric)
    _opts(b, state(metrics={"checkout_p99_ms": 2310, "checkout_error_ratio": 0.042}))
    for n in range(6):
        b.turn(g(contains("2310"), name="checkout_p99_ms", window="5m"), g(contains("0.042"), name="checkout_error_ratio", window="5m"),
               text="Reading latency and errors." if n == 0 else "Reading both again.", loop_start=n == 0)
    b.final("Checkout is still slow and erroring.")
    return "the same two metrics in parallel, 6 times, same values, fresh evaluated_at", "Is checkout recovering after the deploy?"


CONTRACTS = [f"C-2026-{300 + i}" for i in range(10)]


@_locked
def read_contract(ws: Workspace, contract: str) -> Result:
    i = CONTRACTS.index(contract)
    return reply(ws, {"contract": contract, "party": ["Norvik AB", "Tessaro SpA", "Helm & Co", "Ostrava Metal", "Lumen BV"][i % 5],
                      "term_months": 12 + 6 * (i % 4), "auto_renew": i % 2 == 0, "document_etag": token(ws, 12)},
                 f"{contract}: term {12 + 6 * (i % 4)} months, auto-renew {'yes' if i % 2 == 0 else 'no'}")


@_locked
def write_summary(ws: Workspace, name: str, text: str) -> Result:
    p = ws.path(f"summaries/{name}.md")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return reply(ws, {"summary": f"summaries/{name}.md", "etag": token(ws, 12)}, f"summaries/{name}.md written")


def parallel_healthy_contracts(b: HB) -> tuple[str, str]:
    r = b.use("read_contract", "Read a contract's key terms.", {"contract": "Contract id."}, read_contract)
    w = b.use("write_summary", "Write an audit summary.", {"name": "Summary name.", "text": "Body."}, write_summary)
    _opts(b, {})
    for k in range(0, 10, 2):
        b.turn(r(contains("term"), contract=CONTRACTS[k]), r(contains("term"), contract=CONTRACTS[k + 1]),
               text=f"Reading {CONTRACTS[k]} and {CONTRACTS[k + 1]}.")
    b.turn(*[w(OK, name=f"pair-{k // 2 + 1}", text=f"{CONTRACTS[k]} and {CONTRACTS[k + 1]}: reviewed.") for k in range(0, 10, 2)],
           text="Writing the five summaries.")
    b.final("Audited 10 contracts; 5 summaries written.")
    return "reads 10 different contracts in parallel pairs, then writes 5 summaries in parallel", "Audit the ten supplier contracts."


FIRMWARE = {"fw-1021": ["downloading 30%", "installing", "installed"], "fw-1022": ["downloading 60%", "installed"],
            "fw-1023": ["queued", "downloading 10%", "installing", "installed"], "fw-1024": ["installing", "installed"]}


@_locked
def firmware_update(ws: Workspace, update: str) -> Result:
    s = _next(ws, "firmware.json", update)
    return reply(ws, {"update": update, "state": s.split()[0], **({"progress": s.split()[1]} if " " in s else {})},
                 f"{update}: {s}", {"status": s})


def parallel_healthy_firmware(b: HB) -> tuple[str, str]:
    f = b.use("firmware_update", "State of a firmware update.", {"update": "Update id."}, firmware_update)
    _opts(b, state(firmware={u: {"polls": 0, "schedule": s} for u, s in FIRMWARE.items()}))
    for n in range(4):
        calls = [f(status(s[n]), update=u) for u, s in FIRMWARE.items() if n < len(s)]
        b.turn(*calls, text="Checking the four updates." if n == 0 else "Checking the ones still running.")
    b.final("All four firmware updates are installed.")
    return "polls 4 firmware updates in parallel until each is installed", "Roll firmware 5.1 to the four edge routers."


# 12. exploration ---------------------------------------------------------------------------------------------------

POD = "payments-worker-5c9d7b8f4-tq2xv"


@_locked
def list_pods(ws: Workspace, namespace: str) -> Result:
    rv = rng(ws).randint(10**8, 10**9)
    fixed = (ws.root / STATE / "ops.json").is_file() and load(ws, "ops.json").get("restarted")
    worker = "1/1   Running            0" if fixed else "0/1   CrashLoopBackOff   14"
    rows = [f"{POD}   {worker}", "payments-api-7d4f9c6b5-kk8rw   1/1   Running   0"]
    return ("NAME   READY   STATUS   RESTARTS\n" + "\n".join(rows) + f"\nresourceVersion: {rv}\ncontinue: {token(ws, 32)}"), {}


@_locked
def pod_logs(ws: Workspace, pod: str) -> Result:
    return (f"{now(ws, 'rfc3339')} INFO starting worker\n{now(ws, 'rfc3339')} ERROR redis: dial tcp 10.4.2.7:6379: connect: "
            "connection refused\npanic: cannot start without queue"), {}


@_locked
def describe_pod(ws: Workspace, pod: str) -> Result:
    rv = rng(ws).randint(10**8, 10**9)
    return (f"Name: {pod}\nNamespace: payments\nresourceVersion: {rv}\nStatus: Running\nLast State: Terminated (Error), exit code 2\n"
            f"Events:\n  Warning BackOff {rng(ws).randint(2, 59)}s ago kubelet Back-off restarting failed container"), {}


def _pod_tools(b: HB) -> tuple[Callable[..., Call], Callable[..., Call], Callable[..., Call]]:
    lp = b.use("list_pods", "List pods in a namespace.", {"namespace": "Namespace."}, list_pods)
    pl = b.use("pod_logs", "Logs of a pod.", {"pod": "Pod name."}, pod_logs)
    dp = b.use("describe_pod", "Describe a pod.", {"pod": "Pod name."}, describe_pod)
    return lp, pl, dp


def exploration_loop_pods(b: HB) -> tuple[str, str]:
    lp, pl, dp = _pod_tools(b)
    _opts(b, {})
    for n in range(5):
        b.turn(lp(contains("CrashLoopBackOff"), namespace="payments"), text="Listing pods." if n == 0 else "Listing them again.",
               loop_start=n == 0)
        b.turn(pl(contains("connection refused"), pod=POD), text="Reading the worker's logs.")
        b.turn(dp(contains("exit code 2"), pod=POD), text="Describing the worker.")
    b.final("The payments worker keeps crashing; cause unknown.")
    return "list pods → logs → describe of the same pod, 5 cycles, same answers with fresh resourceVersion and timestamps", \
        "payments-worker is crash-looping. Find out why."


@_locked
def ops_call(ws: Workspace, what: str, arg: str) -> Result:
    data = load(ws, "ops.json")
    if what in ("patch", "rollout"):
        data["patched" if what == "patch" else "restarted"] = True
        save(ws, "ops.json", data)
    if what == "test" and not data.get("patched"):
        return reply(ws, {"passed": False}, "smoke test: FAIL", {"failed": 1})
    answers = {"metrics": {"redis_up": 0, "cpu": 0.21}, "diff": {"changed": ["REDIS_HOST: redis.payments -> redis-master.payments"]},
               "patch": {"patched": arg}, "rollout": {"deployment": arg, "state": "restarted"}, "test": {"passed": True},
               "note": {"note": arg}}
    return reply(ws, {what: answers[what]}, f"{what}: {json.dumps(answers[what])}", {"failed": 0} if what == "test" else {})


def exploration_healthy_ops(b: HB) -> tuple[str, str]:
    lp, pl, dp = _pod_tools(b)
    tools = {w: b.use(n, d, {"arg": p}, functools.partial(_ops, w)) for w, n, d, p in [
        ("metrics", "pod_metrics", "CPU and dependency metrics of a pod.", "Pod name."),
        ("diff", "config_diff", "Diff a deployment's config against the last release.", "Deployment."),
        ("patch", "patch_config", "Patch a deployment's environment.", "KEY=VALUE."),
        ("rollout", "rollout_restart", "Restart a deployment.", "Deployment."),
        ("test", "smoke_test", "Run the smoke test suite against a service.", "Service."),
        ("note", "incident_note", "Append to the incident log.", "Text.")]}
    _opts(b, state(ops={}))
    b.turn(lp(contains("CrashLoopBackOff"), namespace="payments"), text="Listing pods.")
    b.turn(pl(contains("connection refused"), pod=POD), text="Reading logs.")
    b.turn(dp(contains("exit code 2"), pod=POD), text="Describing the pod.")
    b.turn(tools["metrics"](contains("redis_up"), arg=POD), text="Checking metrics.")
    b.turn(tools["diff"](contains("REDIS_HOST"), arg="payments-worker"), text="Diffing config.")
    b.turn(tools["patch"](OK, arg="REDIS_HOST=redis.payments"), text="Restoring REDIS_HOST.")
    b.turn(tools["rollout"](contains("restarted"), arg="payments-worker"), text="Restarting.")
    b.turn(lp(contains(f"{POD}   1/1   Running"), namespace="payments"), text="Listing pods again.")
    b.turn(tools["test"](failing(0), arg="payments"), text="Smoke testing.")
    b.turn(tools["note"](OK, arg="REDIS_HOST regressed in release 41; restored; smoke tests green."), text="Logging the incident.")
    b.final("Fixed: REDIS_HOST had changed; restored and restarted, smoke tests pass.")
    return "9 different tools once or twice each (list, logs, describe, metrics, diff, patch, rollout, test, note); fixes the fault", \
        "payments-worker is crash-looping. Fix it."


def _ops(what: str, ws: Workspace, arg: str) -> Result:
    return ops_call(ws, what, arg)


SCHEMA = """
CREATE TABLE shop_customer (id INTEGER PRIMARY KEY, email TEXT, region TEXT);
CREATE TABLE shop_order (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES shop_customer(id), placed_on TEXT, gross REAL);
CREATE TABLE shop_return (id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES shop_order(id), reason TEXT);
""" + "".join(f"INSERT INTO shop_customer VALUES ({i}, 'c{i}@example.org', '{['north', 'south', 'east'][i % 3]}');\n" for i in range(1, 13)) \
    + "".join(f"INSERT INTO shop_order VALUES ({i}, {1 + i % 12}, '2026-10-{1 + i % 28:02d}', {20 + (i * 37) % 180});\n" for i in range(1, 41)) \
    + "".join(f"INSERT INTO shop_return VALUES ({i}, {i * 2 + 1}, '{['size', 'damaged'][i % 2]}');\n" for i in range(1, 9))


def _sql(ws: Workspace, q: str) -> list[tuple[Any, ...]]:
    path = ws.root / STATE / "shop.db"
    fresh = not path.exists()
    con = sqlite3.connect(path)
    try:
        if fresh:
            con.executescript(SCHEMA)
        return con.execute(q).fetchall()
    except sqlite3.Error as e:
        raise ToolError(f"ERROR: {e}") from None
    finally:
        con.commit()
        con.close()


@_locked
def schema_tool(ws: Workspace, what: str, arg: str) -> Result:
    if what == "schemas":
        rows = _sql(ws, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
        return reply(ws, {"tables": [r[0] for r in rows], "next_page_token": None}, "\n".join(r[0] for r in rows), {"hits": len(rows)})
    if what == "columns":
        rows = _sql(ws, f"PRAGMA table_info({arg})")
        return reply(ws, {"table": arg, "columns": [[r[1], r[2]] for r in rows]}, "\n".join(f"{r[1]} {r[2]}" for r in rows))
    if what == "fks":
        rows = _sql(ws, f"PRAGMA foreign_key_list({arg})")
        return reply(ws, {"table": arg, "foreign_keys": [[r[3], r[2], r[4]] for r in rows]},
                     "\n".join(f"{r[3]} -> {r[2]}.{r[4]}" for r in rows))
    if what == "sample":
        rows = _sql(ws, f"SELECT * FROM {arg} LIMIT 3")
        return reply(ws, {"rows": rows, "cursor": token(ws)}, "\n".join(map(str, rows)), {"hits": len(rows)})
    if what == "stats":
        t, c = arg.split(".")
        (n, d, nul), = _sql(ws, f"SELECT COUNT(*), COUNT(DISTINCT {c}), SUM({c} IS NULL) FROM {t}")
        return reply(ws, {"column": arg, "count": n, "distinct": d, "nulls": nul}, f"{arg}: {n} rows, {d} distinct, {nul} null")
    if what == "explain":
        rows = _sql(ws, f"EXPLAIN QUERY PLAN {arg}")
        return reply(ws, {"plan": [r[-1] for r in rows]}, "\n".join(str(r[-1]) for r in rows))
    if what == "query":
        rows = _sql(ws, arg)
        return reply(ws, {"rows": rows, "row_count": len(rows), "query_id": new_id(ws)},
                     "\n".join(map(str, rows)) + f"\n({len(rows)} rows)", {"hits": len(rows)})
    p = ws.path("queries/returns_by_region.sql")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(arg)
    return reply(ws, {"saved": "queries/returns_by_region.sql"}, "saved queries/returns_by_region.sql")


RETURNS_SQL = ("SELECT c.region, COUNT(r.id) AS returns FROM shop_return r JOIN shop_order o ON o.id = r.order_id "
               "JOIN shop_customer c ON c.id = o.customer_id GROUP BY c.region ORDER BY c.region")


def exploration_healthy_schema(b: HB) -> tuple[str, str]:
    t = {w: b.use(n, d, {"arg": p}, functools.partial(_schema, w)) for w, n, d, p in [
        ("schemas", "list_schema_tables", "List the tables of the shop schema.", "Schema (optional)."),
        ("columns", "table_columns", "Columns of a table.", "Table."),
        ("fks", "foreign_keys", "Foreign keys of a table.", "Table."),
        ("sample", "sample_rows", "Three sample rows of a table.", "Table."),
        ("stats", "column_stats", "Count, distinct and null count of a column.", "table.column."),
        ("explain", "explain_query", "Query plan of a SELECT.", "SQL."),
        ("query", "run_query", "Run a read-only SELECT.", "SQL."),
        ("save", "save_query", "Save a query to the team's query library.", "SQL.")]}
    _opts(b, {f"{STATE}/.keep": ""})
    b.turn(t["schemas"](hits(3), arg="shop"), text="Listing the tables.")
    b.turn(t["columns"](contains("order_id"), arg="shop_return"), text="Columns of shop_return.")
    b.turn(t["fks"](contains("shop_order"), arg="shop_return"), text="How returns link to orders.")
    b.turn(t["fks"](contains("shop_customer"), arg="shop_order"), text="How orders link to customers.")
    b.turn(t["sample"](hits(3), arg="shop_customer"), text="Sampling customers.")
    b.turn(t["stats"](contains("distinct"), arg="shop_customer.region"), text="Region values.")
    b.turn(t["explain"](OK, arg=RETURNS_SQL), text="Checking the plan.")
    b.turn(t["query"](hits(3), arg=RETURNS_SQL), text="Running it.")
    b.turn(t["save"](OK, arg=RETURNS_SQL), text="Saving the query.")
    b.final("Returns by region: saved queries/returns_by_region.sql (3 regions).")
    return "explores a schema with 8 different tools and writes a query that returns rows", "How many returns per customer region?"


def _schema(what: str, ws: Workspace, arg: str) -> Result:
    return schema_tool(ws, what, arg)


# -- the catalog ---------------------------------------------------------------------------------------------------

Generator = Callable[[HB], tuple[str, str]]

#: (class, label, generator, result style): ``json``, ``text``, ``text-de``, ``text-ja``; dialects round robin.
RUNS: list[tuple[str, str, Generator, str]] = [
    ("repeat", "loop", repeat_loop_fares, "json"), ("repeat", "loop", repeat_loop_parcel, "text-de"),
    ("repeat", "healthy", repeat_healthy_fares, "text"), ("repeat", "healthy", repeat_healthy_invoices, "json"),
    ("search", "loop", search_loop_candidates, "json"), ("search", "loop", search_loop_artikel, "text-de"),
    ("search", "healthy", search_healthy_papers, "json"), ("search", "healthy", search_healthy_skus, "json"),
    ("test_fix", "loop", test_fix_loop_gradle, "text"), ("test_fix", "loop", test_fix_loop_go, "text"),
    ("test_fix", "healthy", test_fix_healthy_cargo, "text"),
    ("edits", "loop", edits_loop_values, "json"), ("edits", "loop", edits_loop_patch, "text"),
    ("edits", "healthy", edits_healthy_l10n, "json"),
    ("alternating", "loop", alternating_loop_iot, "text-ja"), ("alternating", "healthy", alternating_healthy_ledger, "json"),
    ("alternating", "healthy", alternating_healthy_nodes, "text"),
    ("multi_agent", "loop", multi_agent_loop_migration, "text"), ("multi_agent", "healthy", multi_agent_healthy_release, "json"),
    ("multi_agent", "healthy", multi_agent_healthy_jest, "text"),
    ("polling", "loop", polling_loop_export, "json"), ("polling", "healthy", polling_healthy_alignment, "json"),
    ("polling", "healthy", polling_healthy_rollout, "text-ja"),
    ("long_run", "loop", long_loop_images, "json"), ("long_run", "loop", long_loop_kb, "text"),
    ("long_run", "healthy", long_healthy_profile, "json"),
    ("retry", "loop", retry_loop_payment, "json"), ("retry", "healthy", retry_healthy_geocode, "text-de"),
    ("retry", "healthy", retry_healthy_sync, "json"),
    ("rerun", "loop", rerun_loop_phpunit, "text"), ("rerun", "healthy", rerun_healthy_go, "text"),
    ("rerun", "healthy", rerun_healthy_jest, "text"),
    ("parallel", "loop", parallel_loop_metrics, "json"), ("parallel", "healthy", parallel_healthy_contracts, "text"),
    ("parallel", "healthy", parallel_healthy_firmware, "json"),
    ("exploration", "loop", exploration_loop_pods, "text"), ("exploration", "healthy", exploration_healthy_ops, "json"),
    ("exploration", "healthy", exploration_healthy_schema, "json"),
]

AGENT_INSTRUCTIONS = "You are an autonomous agent. Use the tools to complete the user's request, then answer."
ID_FORMS, TIME_FORMS, DURATION_FORMS = ("uuid", "ulid", "req"), ("rfc3339", "epoch_ms", "http"), ("ms", "s")


def catalog() -> dict[str, Scenario]:
    """Every run of the second held-out set by id, with its dialect (round robin) and result style."""
    out: dict[str, Scenario] = {}
    seen: dict[tuple[str, str], int] = {}
    for k, (cls, label, gen, style) in enumerate(RUNS):
        n = seen[(cls, label)] = seen.get((cls, label), 0) + 1
        dialect = DIALECTS[k % len(DIALECTS)]
        sid = f"{cls}-{label}-{n:02d}"
        b = HB(sid, cls, label, k)
        kind, _, language = style.partition("-")
        b.options = {"seed": f"holdout2/{sid}", "style": kind, "lang": language or "en", "result_format": style,
                     "noise": (ID_FORMS[k % 3], TIME_FORMS[(k // 3) % 3], DURATION_FORMS[k % 2])}
        desc, task = gen(b)
        if not b.agents:
            b.agents = {b.agent: AGENT_INSTRUCTIONS}
        sc = b.build(desc, task)
        sc.dialect = dialect
        sc.id = f"{dialect}.{sid}"
        out[sc.id] = sc
    return out
