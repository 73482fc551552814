"""Runs of five more frameworks, whose tools answer with the noise real services have.

The corpus's first six dialects were recorded with deterministic tools (no times, no ids). Production tools
are not like that: every answer of an HTTP API carries a fresh request id, a serving time, a duration, rate
limit counters, cursors and etags. These runs are recorded in five more frameworks with their own (or their
usual) OpenTelemetry instrumentation, with tools over a simulated order/ticket/CI service that put such
noise in every result, drawn afresh on each call (``secrets`` and the wall clock), never stripped.

Dialects (drivers in ``drivers/``): ``langgraph_openllmetry`` (LangGraph traced by OpenLLMetry's
``opentelemetry-instrumentation-langchain``), ``autogen`` (AutoGen AgentChat's native OTel tracing),
``google_adk`` (Google ADK's native OTel tracing), ``llamaindex`` (LlamaIndex ``FunctionAgent`` traced by
``openinference-instrumentation-llama-index``), ``agno`` (Agno ``Agent`` traced by
``openinference-instrumentation-agno``).

The noise, per result (see the tool functions below): ``request_id`` (``req_`` + 22 base62 characters),
``served_at`` (epoch milliseconds), ``duration_ms`` / ``took_ms`` (a float), RFC 3339 times with
microseconds (``checked_at``, ``updated_at`` of a write, log lines' times), a rate-limit counter that falls
by one on every call, search ids (UUID 4), ULIDs (CI build ids), commit shas (40 hex), weak etags, a
monotonically increasing ``resourceVersion``, base64url page tokens that encode an offset and a time.

Scenarios, written down before any run was recorded or measured (the label and the loop's first call
follow from the story, never from otelloop's verdict):

Loops (``loop_start`` = the first call of the repeating cycle, after any productive work):

- ``repeat`` / same order: ``get_order`` of two other orders, then ``get_order`` of the same order 10 times;
  the order never changes, only the meta noise does. Loop starts at the first repeated read.
- ``repeat`` / stuck pagination: ``list_orders`` asked for the next page 10 times with the
  ``page_token`` the previous answer gave; the service ignores the token (a broken cursor), so every
  answer is the same first page with a fresh ``next_page_token``. Loop starts at the second call (the
  first "next page" call); the first call is the productive first page.
- ``search`` / rephrased searches: one search that finds something, then 10 paraphrases of a question
  the knowledge base has nothing on, each ``{"hits": [], "total": 0}`` with a fresh search id and time.
  Loop starts at the first empty search.
- ``test_fix`` / test-fix loop: the CI fails on one test; the agent applies a different wrong patch and
  re-runs CI, 5 times; every CI run fails the same test with the same assertion, a new build id, ULID,
  start time and duration. Loop starts at the first patch.
- ``alternating`` / ping-pong: ``get_deployment`` and ``get_logs`` of the same service, alternating 6
  times each; the deployment stays ``1/3 ready``, the logs show the same crash with fresh timestamps.
  Loop starts at the first ``get_deployment`` call after one productive ``list_services`` call.
- ``retry`` / retry without end: ``get_invoice`` of one invoice fails 10 times with ``500 Internal
  Server Error`` (the upstream ledger times out), each with its own request id and elapsed time. Loop
  starts at the first attempt.
- ``polling`` / a job that never moves: ``job_status`` polled 10 times, ``running`` at 40 % each time
  (the job's own ``updated_at`` does not change), with a fresh ``checked_at`` and request id. Loop starts
  at the first poll after the job was started.

Healthy:

- ``repeat`` / different records: ``get_order`` of 9 different orders (same result shape, different
  content), then a summary.
- ``polling`` / a poll that completes: a job started, then polled 5–6 times: ``queued`` → ``running``
  25 % → 60 % → 90 % → ``done`` with a result.
- ``edits`` / a batch: ``update_ticket`` closing 8 different tickets; the results differ in the ticket id,
  its new version and the noise.
- ``retry`` / a retry that succeeds: three invoices read; one answers ``429 Too Many Requests`` three
  times, then succeeds; another answers ``503`` once, then succeeds.
- ``test_fix`` / fixed one by one: three failing tests, each fixed by a patch; the CI's failure count
  falls 3 → 2 → 1 → 0.
- ``repeat`` / pagination through: ``list_orders`` followed through 5 pages with the tokens the service
  gives (different items on each page), then ``get_order`` of two of them.

Each framework records 3 loops and 4 healthy runs, chosen in rotation (:func:`catalog`), so every kind
is recorded in at least two frameworks.

``python benchmarks/corpus/record.py --dialect agno`` (etc.) records them; see the corpus README.
"""

from __future__ import annotations

import base64
import functools
import json
import secrets
import string
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .holdout import HB
from .script import Call, Expect, Scenario, contains, error, failing, hits, status
from .workspace import ToolError, Workspace, load_state, save_state

EMPTY = Expect("empty")
STATE = ".svc"
#: The dialects recorded from these scenarios (the corpus's first six are in ``drivers.DIALECTS``).
NOISY_DIALECTS = ("langgraph_openllmetry", "autogen", "google_adk", "llamaindex", "agno")
AGENT_INSTRUCTIONS = ("You are an operations assistant for an online shop. Use the tools to answer; "
                      "report what you found.")

_LOCK = threading.RLock()
_B62 = string.digits + string.ascii_letters
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _locked(fn: Callable[..., tuple[str, dict[str, Any]]]) -> Callable[..., tuple[str, dict[str, Any]]]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> tuple[str, dict[str, Any]]:
        with _LOCK:
            return fn(*args, **kwargs)
    return wrapper


# -- noise: drawn afresh on every call ---------------------------------------------------------------------------


def request_id() -> str:
    return "req_" + "".join(secrets.choice(_B62) for _ in range(22))


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


def rfc3339(t: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if t is None else t, UTC).isoformat(timespec="microseconds") \
        .replace("+00:00", "Z")


def ulid() -> str:
    ms = epoch_ms()
    head = "".join(_CROCKFORD[(ms >> (5 * k)) & 31] for k in range(9, -1, -1))
    return head + "".join(secrets.choice(_CROCKFORD) for _ in range(16))


def duration_ms() -> float:
    return round(2 + secrets.randbelow(40000) / 100, 2)


def page_token(offset: int) -> str:
    raw = json.dumps({"o": offset, "t": epoch_ms(), "n": secrets.token_hex(4)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _offset(token: str) -> int:
    if not token:
        return 0
    try:
        return int(json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["o"])
    except (ValueError, KeyError) as e:
        raise ToolError(f"400 Bad Request: invalid page_token (request_id={request_id()})") from e


def _meta(ws: Workspace) -> dict[str, Any]:
    """What every answer of the service carries: request id, serving time, duration, rate-limit counter."""
    st = _load(ws, "limits.json")
    st["remaining"] -= 1
    _save(ws, "limits.json", st)
    return {"request_id": request_id(), "served_at": epoch_ms(), "duration_ms": duration_ms(),
            "rate_limit": {"limit": 600, "remaining": st["remaining"]}}


def _load(ws: Workspace, name: str) -> Any:
    return load_state(ws, STATE, name, "503 Service Unavailable: {name} is not configured")


def _save(ws: Workspace, name: str, data: Any) -> None:
    save_state(ws, STATE, name, data)


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=None)


# -- tools --------------------------------------------------------------------------------------------------------


@_locked
def get_order(ws: Workspace, order_id: str) -> tuple[str, dict[str, Any]]:
    order = _load(ws, "orders.json").get(order_id)
    if order is None:
        raise ToolError(f"404 Not Found: order {order_id} (request_id={request_id()})")
    return _dump({"data": {"id": order_id, **order}, "meta": _meta(ws)}), {}


@_locked
def list_orders(ws: Workspace, status: str, page_token: str = "") -> tuple[str, dict[str, Any]]:
    svc = _load(ws, "orders.json")
    ids = sorted(k for k, o in svc.items() if o["status"] == status)
    broken = _load(ws, "flags.json").get("cursor_ignored", False)
    start = 0 if broken else _offset(page_token)
    page = ids[start:start + 4]
    more = start + 4 < len(ids)
    out = {"data": [{"id": k, "customer": svc[k]["customer"], "total": svc[k]["total"]} for k in page],
           "has_more": more, "next_page_token": page_token_for(start + 4) if more else None, "meta": _meta(ws)}
    return _dump(out), {"hits": len(page)}


def page_token_for(offset: int) -> str:
    return page_token(offset)


@_locked
def search_kb(ws: Workspace, query: str) -> tuple[str, dict[str, Any]]:
    words = {w.lower().strip("?.,") for w in query.split() if len(w) > 3}
    found = [a for a in _load(ws, "kb.json") if words & set(a["keywords"])]
    out = {"query": query, "hits": [{"id": a["id"], "title": a["title"], "score": round(0.5 + len(
        words & set(a["keywords"])) / 10, 3)} for a in found], "total": len(found), "search_id": str(uuid.uuid4()),
        "took_ms": duration_ms(), "searched_at": rfc3339()}
    return _dump(out), {"hits": len(found)}


@_locked
def start_job(ws: Workspace, kind: str) -> tuple[str, dict[str, Any]]:
    jobs = _load(ws, "jobs.json")
    job = jobs[kind]
    job["polls"] = 0
    job["updated_at"] = rfc3339()
    _save(ws, "jobs.json", jobs)
    return _dump({"job_id": job["id"], "state": "queued", "created_at": job["updated_at"], "meta": _meta(ws)}), {}


@_locked
def job_status(ws: Workspace, job_id: str) -> tuple[str, dict[str, Any]]:
    jobs = _load(ws, "jobs.json")
    job = next((j for j in jobs.values() if j["id"] == job_id), None)
    if job is None:
        raise ToolError(f"404 Not Found: job {job_id} (request_id={request_id()})")
    state, pct = job["schedule"][min(job["polls"], len(job["schedule"]) - 1)]
    moved = job["polls"] == 0 or job["schedule"][min(job["polls"] - 1, len(job["schedule"]) - 1)] != [state, pct]
    job["polls"] += 1
    if moved:
        job["updated_at"] = rfc3339()
    _save(ws, "jobs.json", jobs)
    body: dict[str, Any] = {"job_id": job_id, "state": state, "progress_pct": pct, "updated_at": job["updated_at"],
                            "etag": 'W/"' + secrets.token_hex(8) + '"', "checked_at": rfc3339(),
                            "request_id": request_id()}
    if state == "done":
        body["result"] = job["result"]
    return _dump(body), {"status": state}


@_locked
def get_invoice(ws: Workspace, invoice_id: str) -> tuple[str, dict[str, Any]]:
    inv = _load(ws, "invoices.json")
    rec = inv.get(invoice_id)
    if rec is None:
        raise ToolError(f"404 Not Found: invoice {invoice_id} (request_id={request_id()})")
    if rec["failures"] != 0:
        if rec["failures"] > 0:
            rec["failures"] -= 1
            _save(ws, "invoices.json", inv)
        raise ToolError(rec["error"].format(rid=request_id(), ms=duration_ms(), at=rfc3339()))
    return _dump({"data": {"id": invoice_id, **rec["data"]}, "meta": _meta(ws)}), {}


@_locked
def update_ticket(ws: Workspace, ticket_id: str, status: str) -> tuple[str, dict[str, Any]]:
    tickets = _load(ws, "tickets.json")
    t = tickets.get(ticket_id)
    if t is None:
        raise ToolError(f"404 Not Found: ticket {ticket_id} (request_id={request_id()})")
    t["status"], t["version"] = status, t["version"] + 1
    _save(ws, "tickets.json", tickets)
    return _dump({"id": ticket_id, "status": status, "version": t["version"], "updated_at": rfc3339(),
                  "request_id": request_id()}), {}


@_locked
def list_services(ws: Workspace, env: str) -> tuple[str, dict[str, Any]]:
    svc = _load(ws, "cluster.json")
    return _dump({"env": env, "services": [{"name": n, "ready": f"{d['ready']}/{d['replicas']}"}
                                           for n, d in sorted(svc.items())], "meta": _meta(ws)}), {}


@_locked
def get_deployment(ws: Workspace, name: str) -> tuple[str, dict[str, Any]]:
    cl = _load(ws, "cluster.json")
    d = cl.get(name)
    if d is None:
        raise ToolError(f"404 Not Found: deployment {name}")
    d["resourceVersion"] += 1 + secrets.randbelow(7)
    _save(ws, "cluster.json", cl)
    return _dump({"name": name, "image": d["image"], "replicas": d["replicas"], "ready": d["ready"],
                  "status": d["status"], "resourceVersion": str(d["resourceVersion"]),
                  "observed_at": rfc3339()}), {}


@_locked
def get_logs(ws: Workspace, name: str) -> tuple[str, dict[str, Any]]:
    d = _load(ws, "cluster.json").get(name)
    if d is None:
        raise ToolError(f"404 Not Found: deployment {name}")
    now = time.time()
    pod = f"{name}-7d9f8c6b5-x2k4q"  # a crash-looping pod keeps its name; its lines' times move
    lines = [f"{rfc3339(now - 2.5 + k * 0.8)} {pod} {line}" for k, line in enumerate(d["log"])]
    return "\n".join(lines), {}


@_locked
def apply_patch(ws: Workspace, file: str, patch: str) -> tuple[str, dict[str, Any]]:
    ci = _load(ws, "ci.json")
    fixed = ci["fixes"].get(patch)
    if fixed in ci["failing"]:
        ci["failing"].remove(fixed)
    _save(ws, "ci.json", ci)
    return _dump({"applied": True, "file": file, "commit": secrets.token_hex(20), "at": rfc3339()}), {}


@_locked
def run_ci(ws: Workspace, suite: str) -> tuple[str, dict[str, Any]]:
    ci = _load(ws, "ci.json")
    ci["build"] += 1
    _save(ws, "ci.json", ci)
    failing_now = [t for t in ci["tests"] if t in ci["failing"]]
    lines = [f"CI build #{ci['build']} id={ulid()} suite={suite} started {rfc3339()}",
             f"collected {len(ci['tests']) + 20} items", ""]
    for t in failing_now:
        lines.append(f"FAILED {t} - {ci['messages'][t]}")
    passed = len(ci["tests"]) + 20 - len(failing_now)
    secs = round(2 + secrets.randbelow(300) / 100, 2)
    summary = (f"{len(failing_now)} failed, {passed} passed" if failing_now else f"{passed} passed")
    lines.append(f"========== {summary} in {secs}s ==========")
    lines.append(f"[exit code {1 if failing_now else 0}]")
    return "\n".join(lines), {"failed": len(failing_now)}


# -- the service's data -------------------------------------------------------------------------------------------

CUSTOMERS = ["Ana Lima", "Ben Okafor", "Chen Wei", "Dara Novak", "Eli Haddad", "Fay Morgan", "Gus Petrov",
             "Hana Ito", "Ivo Kral", "Jade Ruiz", "Kofi Mensah", "Lena Berg", "Milo Rossi", "Nia Patel"]
ITEMS = [("desk lamp", 3900), ("usb-c hub", 2450), ("notebook", 600), ("office chair", 18900),
         ("monitor arm", 7400), ("keyboard", 8900), ("headset", 5900), ("webcam", 4900), ("cable kit", 1200)]


def orders(n: int = 14, seed: int = 0) -> dict[str, Any]:
    out = {}
    for k in range(n):
        item, price = ITEMS[(k + seed) % len(ITEMS)]
        qty = 1 + (k * 7 + seed) % 3
        out[f"ord_{4100 + k * 13 + seed}"] = {
            "customer": CUSTOMERS[(k + seed) % len(CUSTOMERS)], "items": [{"sku": item, "qty": qty}],
            "total": f"{price * qty / 100:.2f} EUR",
            "status": ["shipped", "pending", "shipped", "refunded"][(k + seed) % 4],
            "placed_on": f"2026-10-{1 + (k * 3 + seed) % 28:02d}"}
    return out


KB = [
    {"id": "kb-101", "title": "Refund windows by country", "keywords": ["refund", "refunds", "window", "return", "country"]},
    {"id": "kb-102", "title": "Changing a shipping address", "keywords": ["shipping", "address", "change", "delivery"]},
    {"id": "kb-103", "title": "Invoice corrections", "keywords": ["invoice", "correction", "vat", "billing"]},
    {"id": "kb-104", "title": "Damaged items on arrival", "keywords": ["damaged", "broken", "arrival", "replacement"]},
    {"id": "kb-105", "title": "Gift cards and store credit", "keywords": ["gift", "card", "credit", "voucher"]},
]

#: a question the knowledge base has nothing on, asked 10 ways (no word of these is a KB keyword)
MISSING = [
    "customs duties for orders to Norway", "import tax Norway parcels", "who pays Norwegian customs fees",
    "EEA non-EU duty charges", "tariffs on deliveries outside the union", "Norway toll clearance costs",
    "duties owed by recipients in Oslo", "customs declaration for Bergen orders", "Norwegian VOEC scheme",
    "cross-border duty policy Scandinavia",
]


def _state(b: HB, **stores: Any) -> None:
    files = {f"{STATE}/limits.json": json.dumps({"remaining": 600}), f"{STATE}/flags.json": json.dumps({})}
    files.update({f"{STATE}/{k}.json": json.dumps(v) for k, v in stores.items()})
    b.options = {"modules": [], "files": files}


def _pick(b: HB, *kinds: str) -> dict[str, Callable[..., Call]]:
    """Declare the tools a story uses (only those are given to the agent) and return their call makers."""
    table: dict[str, tuple[str, str, dict[str, str], Callable[..., tuple[str, dict[str, Any]]], tuple[str, ...]]] = {
        "order": ("get_order", "Get one order by id from the orders API (JSON).",
                  {"order_id": "Order id, e.g. ord_4100."}, get_order, ()),
        "list": ("list_orders", "List orders with a status, 4 per page; pass next_page_token to get the next page.",
                 {"status": "shipped, pending or refunded.", "page_token": "Token from the previous page, or empty."},
                 list_orders, ("page_token",)),
        "kb": ("search_kb", "Search the help-center knowledge base.", {"query": "What to look for."}, search_kb, ()),
        "start": ("start_job", "Start a background export job.", {"kind": "Job kind: orders_export or vat_report."},
                  start_job, ()),
        "job": ("job_status", "Get the state of a background job.", {"job_id": "The job id."}, job_status, ()),
        "invoice": ("get_invoice", "Fetch an invoice from the billing API.", {"invoice_id": "Invoice id."},
                    get_invoice, ()),
        "ticket": ("update_ticket", "Set the status of a support ticket.",
                   {"ticket_id": "Ticket id.", "status": "New status: open, pending or closed."}, update_ticket, ()),
        "services": ("list_services", "List the deployments of an environment.", {"env": "prod or staging."},
                     list_services, ()),
        "deploy": ("get_deployment", "Describe one deployment.", {"name": "Deployment name."}, get_deployment, ()),
        "logs": ("get_logs", "Tail the logs of a deployment's newest pod.", {"name": "Deployment name."}, get_logs, ()),
        "patch": ("apply_patch", "Apply a change to a file in the repository and commit it.",
                  {"file": "File path.", "patch": "The change, as a short description of the new code."},
                  apply_patch, ()),
        "ci": ("run_ci", "Run the CI test suite and return its log.", {"suite": "Suite name: unit or all."}, run_ci, ()),
    }
    out = {}
    for k in kinds:
        name, desc, params, fn, optional = table[k]
        out[k] = b.use(name, desc, params, fn, optional=optional)
    return out


# -- loops --------------------------------------------------------------------------------------------------------


def loop_same_order(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "order")
    data = orders(seed=i)
    _state(b, orders=data)
    ids = sorted(data)
    b.turn(t["order"](contains(data[ids[1]]["customer"]), order_id=ids[1]), text="Looking up the first order.")
    b.turn(t["order"](contains(data[ids[2]]["customer"]), order_id=ids[2]), text="And the second one.")
    target = ids[5]
    for k in range(10):
        b.turn(t["order"](contains(data[target]["total"]), order_id=target),
               text="Checking the disputed order." if k == 0 else
               ["Let me look at that order again.", "Re-reading the order to confirm the total.",
                "Fetching the order once more."][k % 3], loop_start=k == 0)
    b.final("The disputed order's total is as shown; I could not find a discrepancy.")
    return "reads the same order 10 times after two others; the order never changes, its meta noise does", \
        f"A customer disputes the total of order {target}. Compare it with their earlier orders and explain."


def loop_stuck_pagination(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "list")
    data = orders(seed=i)
    _state(b, orders=data, flags={"cursor_ignored": True})
    b.turn(t["list"](hits(1), status="shipped"), text="Listing the shipped orders.")
    for k in range(10):
        # the token is whatever the previous page returned; the scripted model cannot know it in advance, so
        # it passes a token of the same shape: the service ignores tokens anyway (that is the bug)
        b.turn(t["list"](hits(1), status="shipped", page_token=page_token(4)),
               text="Getting the next page." if k == 0 else "Next page.", loop_start=k == 0)
    b.final("I went through the pages of shipped orders.")
    return "asks for the next page 10 times with a new page token; the service returns the same first page", \
        "Count the shipped orders and list their customers."


def loop_search(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "kb")
    _state(b, kb=KB)
    b.turn(t["kb"](hits(1), query="refund window by country"), text="Searching the refund policy first.")
    for k in range(10):
        q = MISSING[(k + i) % len(MISSING)]
        b.turn(t["kb"](EMPTY, query=q), text="Searching for the customs policy." if k == 0 else
               ["Trying other words.", "Maybe it is filed differently.", "One more phrasing."][k % 3],
               loop_start=k == 0)
    b.final("The knowledge base has no article on customs duties for Norway.")
    return "one useful search, then 10 rephrasings of a question the knowledge base cannot answer, all empty", \
        "A customer in Norway asks who pays the customs duties on their order. Find our policy."


CI_TESTS = ["tests/test_pricing.py::test_discount", "tests/test_pricing.py::test_vat_rounding",
            "tests/test_cart.py::test_merge_lines", "tests/test_tax.py::test_reverse_charge"]
CI_MESSAGES = {
    CI_TESTS[0]: "AssertionError: assert Decimal('90.00') == Decimal('85.00')",
    CI_TESTS[1]: "AssertionError: assert Decimal('19.99') == Decimal('20.00')",
    CI_TESTS[2]: "KeyError: 'sku'",
    CI_TESTS[3]: "AssertionError: expected tax 0 for reverse charge, got 4.18",
}


def _ci(failing_tests: list[str], fixes: dict[str, str]) -> dict[str, Any]:
    return {"tests": CI_TESTS, "failing": failing_tests, "messages": CI_MESSAGES, "fixes": fixes, "build": 8210}


def loop_test_fix(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "patch", "ci")
    _state(b, ci=_ci([CI_TESTS[0]], {}))
    b.turn(t["ci"](failing(1), suite="unit"), text="Running the unit suite to see what fails.")
    wrong = ["apply the discount after VAT", "round the discount to two places", "use percent / 100 for the discount",
             "subtract the discount from the unit price", "apply the discount to the net total"]
    for k in range(5):
        b.turn(t["patch"](contains('"applied": true'), file="shop/pricing.py", patch=wrong[(k + i) % len(wrong)]),
               text="Trying a fix for the discount." if k == 0 else "Another approach to the discount.",
               loop_start=k == 0)
        b.turn(t["ci"](failing(1), suite="unit"), text="Re-running CI.")
    b.final("test_discount still fails; the discount logic needs a closer look by a person.")
    return "patches the discount 5 different wrong ways; CI fails the same test after each (new build id and time)", \
        "CI is red on main. Fix it."


def loop_ping_pong(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "services", "deploy", "logs")
    cluster = {"checkout": {"image": "shop/checkout:2.14.1", "replicas": 3, "ready": 1, "status": "Progressing",
                            "resourceVersion": 88120,
                            "log": ["ERROR pool: connection refused to db-primary:5432",
                                    "WARN retrying in 2s", "FATAL giving up after 5 attempts"]},
               "catalog": {"image": "shop/catalog:1.9.0", "replicas": 2, "ready": 2, "status": "Available",
                           "resourceVersion": 41002, "log": ["INFO ready"]}}
    _state(b, cluster=cluster)
    b.turn(t["services"](contains("checkout"), env="prod"), text="Listing prod services.")
    for k in range(6):
        b.turn(t["deploy"](contains('"ready": 1'), name="checkout"), text="Checking the checkout rollout."
               if k == 0 else "Checking the rollout again.", loop_start=k == 0)
        b.turn(t["logs"](contains("connection refused"), name="checkout"), text="Looking at the logs.")
    b.final("checkout cannot reach its database; the rollout is stuck at 1/3.")
    return "alternates describe and logs of the same stuck deployment 6 times each; same state, fresh timestamps", \
        "The checkout rollout is not finishing. Find out why."


def loop_retry(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "invoice")
    inv = {"inv_2207": {"data": {"amount": "120.00 EUR", "status": "paid"}, "failures": 0, "error": ""},
           "inv_2231": {"data": {"amount": "89.90 EUR", "status": "open"}, "failures": -1,
                        "error": "500 Internal Server Error: upstream ledger timed out after {ms}ms "
                                 "(request_id={rid}, at={at})"}}
    _state(b, invoices=inv)
    b.turn(t["invoice"](contains("120.00"), invoice_id="inv_2207"), text="Fetching the first invoice.")
    for k in range(10):
        b.turn(t["invoice"](error("500 Internal Server Error"), invoice_id="inv_2231"),
               text="Fetching the second invoice." if k == 0 else "Retrying.", loop_start=k == 0)
    b.final("The billing API keeps failing for inv_2231.")
    return "retries one invoice 10 times, each a 500 with its own request id and elapsed time", \
        "Reconcile invoices inv_2207 and inv_2231 with the bank statement."


def loop_stuck_job(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "start", "job")
    jobs = {"orders_export": {"id": f"job_{secrets.token_hex(6)}", "schedule": [["queued", 0], ["running", 40]],
                              "polls": 0, "result": "", "updated_at": ""}}
    _state(b, jobs=jobs)
    jid = jobs["orders_export"]["id"]
    b.turn(t["start"](contains(str(jid)), kind="orders_export"), text="Starting the export.")
    b.turn(t["job"](status("queued"), job_id=jid), text="Checking the job.")
    for k in range(10):
        b.turn(t["job"](status("running"), job_id=jid), text="Waiting for the export." if k == 0 else "Polling again.",
               loop_start=k == 0)
    b.final("The export is stuck at 40 %.")
    return "polls an export job 10 times; it stays running at 40 % (its updated_at does not move)", \
        "Export last month's orders to the data warehouse."


# -- healthy ------------------------------------------------------------------------------------------------------


def healthy_orders(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "order")
    data = orders(seed=i + 3)
    _state(b, orders=data)
    ids = sorted(data)[:9]
    for k, oid in enumerate(ids):
        b.turn(t["order"](contains(data[oid]["customer"]), order_id=oid),
               text="Reading the first order." if k == 0 else "Next order.")
    b.final("Nine orders reviewed; two are refunded, the rest shipped or pending as expected.")
    return "reads 9 different orders once each (same result shape, different content)", \
        f"Review the orders {', '.join(ids)} for anything unusual."


def healthy_poll(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "start", "job")
    schedule = [["queued", 0], ["running", 25], ["running", 60], ["running", 90], ["done", 100]]
    if i % 2:
        schedule.insert(2, ["running", 40])
    jobs = {"vat_report": {"id": f"job_{secrets.token_hex(6)}", "schedule": schedule, "polls": 0,
                           "result": "s3://exports/vat-2026-10.csv", "updated_at": ""}}
    _state(b, jobs=jobs)
    jid = jobs["vat_report"]["id"]
    b.turn(t["start"](contains(str(jid)), kind="vat_report"), text="Starting the VAT report.")
    for k, (state, _) in enumerate(schedule):
        b.turn(t["job"](status(str(state)), job_id=jid), text="Checking progress." if k == 0 else "Polling again.")
    b.final("The VAT report is ready at s3://exports/vat-2026-10.csv.")
    return f"polls a report job {len(schedule)} times until done (queued, running 25/60/90 %, done)", \
        "Produce the October VAT report."


def healthy_batch(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "ticket")
    tickets = {f"T-{3300 + k * 7 + i}": {"status": "pending", "version": 1 + k % 3} for k in range(8)}
    _state(b, tickets=tickets)
    for k, tid in enumerate(sorted(tickets)):
        b.turn(t["ticket"](contains('"status": "closed"'), ticket_id=tid, status="closed"),
               text="Closing the resolved tickets." if k == 0 else "Next ticket.")
    b.final("All 8 resolved tickets are closed.")
    return "closes 8 different tickets; results differ in ticket id, version and noise", \
        f"Close the resolved tickets {', '.join(sorted(tickets))}."


def healthy_retry(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "invoice")
    inv = {"inv_3101": {"data": {"amount": "42.00 EUR", "status": "paid"}, "failures": 0, "error": ""},
           "inv_3102": {"data": {"amount": "310.50 EUR", "status": "paid"}, "failures": 3,
                        "error": "429 Too Many Requests: rate limit exceeded, retry after {ms}ms (request_id={rid})"},
           "inv_3103": {"data": {"amount": "18.75 EUR", "status": "open"}, "failures": 1,
                        "error": "503 Service Unavailable (request_id={rid}, at={at})"}}
    _state(b, invoices=inv)
    b.turn(t["invoice"](contains("42.00"), invoice_id="inv_3101"), text="Fetching the invoices.")
    for _ in range(3):
        b.turn(t["invoice"](error("429"), invoice_id="inv_3102"), text="Fetching inv_3102.")
    b.turn(t["invoice"](contains("310.50"), invoice_id="inv_3102"), text="Retrying after the rate limit.")
    b.turn(t["invoice"](error("503"), invoice_id="inv_3103"), text="Fetching inv_3103.")
    b.turn(t["invoice"](contains("18.75"), invoice_id="inv_3103"), text="Retrying.")
    b.final("inv_3101 and inv_3102 are paid; inv_3103 (18.75 EUR) is open.")
    return "reads 3 invoices; one is rate limited 3 times (429), one unavailable once (503); every retry succeeds", \
        "Which of the invoices inv_3101, inv_3102 and inv_3103 are still open?"


def healthy_test_fix(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "patch", "ci")
    fixes = {"compare the discount as percent of the net price": CI_TESTS[0],
             "round VAT half-up to cents": CI_TESTS[1], "read the line's product_sku key": CI_TESTS[2]}
    _state(b, ci=_ci(CI_TESTS[:3], fixes))
    b.turn(t["ci"](failing(3), suite="unit"), text="Running the unit suite.")
    files = ["shop/pricing.py", "shop/tax.py", "shop/cart.py"]
    for k, (patch, n) in enumerate(zip(fixes, (2, 1, 0), strict=True)):
        b.turn(t["patch"](contains('"applied": true'), file=files[k], patch=patch), text="Fixing the next failure.")
        b.turn(t["ci"](failing(n), suite="unit"), text="Re-running CI.")
    b.final("CI is green: three fixes (discount, VAT rounding, cart lines).")
    return "fixes 3 failing tests one by one; CI's failure count falls 3, 2, 1, 0", "CI is red on main. Fix it."


def healthy_pages(b: HB, i: int) -> tuple[str, str]:
    t = _pick(b, "list", "order")
    data = orders(n=20, seed=i)
    for o in data.values():
        o["status"] = "shipped"
    _state(b, orders=data)
    ids = sorted(data)
    b.turn(t["list"](hits(4), status="shipped"), text="Listing shipped orders.")
    for page in range(1, 5):
        b.turn(t["list"](contains(ids[page * 4]), status="shipped", page_token=page_token(page * 4)),
               text="Next page.")
    b.turn(t["order"](contains(data[ids[3]]["customer"]), order_id=ids[3]), text="Looking at one of them.")
    b.turn(t["order"](contains(data[ids[17]]["customer"]), order_id=ids[17]), text="And another.")
    b.final("20 orders shipped in October; details of two checked.")
    return "follows 5 pages of shipped orders with the service's tokens (different items each page), " \
        "then reads two orders", "How many orders did we ship in October? Show two examples."


LOOPS: list[tuple[str, Callable[[HB, int], tuple[str, str]]]] = [
    ("repeat", loop_same_order), ("search", loop_search), ("test_fix", loop_test_fix),
    ("alternating", loop_ping_pong), ("retry", loop_retry), ("repeat", loop_stuck_pagination),
    ("polling", loop_stuck_job)]
HEALTHY: list[tuple[str, Callable[[HB, int], tuple[str, str]]]] = [
    ("repeat", healthy_orders), ("polling", healthy_poll), ("edits", healthy_batch), ("retry", healthy_retry),
    ("test_fix", healthy_test_fix), ("repeat", healthy_pages)]
LOOPS_PER_DIALECT = 3
HEALTHY_PER_DIALECT = 4


def catalog() -> dict[str, Scenario]:
    """The noisy runs by id: per dialect 3 loops and 4 healthy runs, the kinds taken in rotation."""
    out: dict[str, Scenario] = {}
    for j, dialect in enumerate(NOISY_DIALECTS):
        seen: dict[tuple[str, str], int] = {}
        picks = [("loop", *LOOPS[(j * LOOPS_PER_DIALECT + m) % len(LOOPS)]) for m in range(LOOPS_PER_DIALECT)]
        picks += [("healthy", *HEALTHY[(j * HEALTHY_PER_DIALECT + m) % len(HEALTHY)])
                  for m in range(HEALTHY_PER_DIALECT)]
        for label, cls, gen in picks:
            n = seen[(cls, label)] = seen.get((cls, label), 0) + 1
            sid = f"{cls}-{label}-{n:02d}"
            b = HB(sid, cls, label, j)
            desc, task = gen(b, j)
            b.agents = {b.agent: AGENT_INSTRUCTIONS}
            sc = b.build(desc, task)
            sc.dialect = dialect
            sc.id = f"{dialect}.{sid}"
            out[sc.id] = sc
    return out
