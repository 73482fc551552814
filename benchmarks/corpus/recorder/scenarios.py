"""The scenario catalog: twelve classes, each told as a loop and as healthy work, in several variants.

Every generator takes a :class:`~recorder.builder.Builder` and a variant number ``i`` and writes the
story; ``i`` changes the tools' vocabulary, the files, the wording, the length and the productive work
before a loop. :func:`catalog` spreads the variants over the six dialects.

Where a loop starts (``loop_start``): at the first call of the first iteration of the repeating cycle
(for a loop that follows productive work, the first call after it).
"""

from __future__ import annotations

from collections.abc import Callable

from .builder import Builder
from .drivers import DIALECTS
from .project import MODULES
from .script import EMPTY, OK, Scenario, contains, error, failing, hits, status

# -- shared workspace content ---------------------------------------------------------------------------

DOCS = [
    {"id": "d01", "title": "Deploying Orbit with the CLI", "text": "Run orbit deploy --env staging to deploy a "
     "service. The deploy command uploads the build, runs migrations and switches traffic."},
    {"id": "d02", "title": "Configuration files", "text": "Orbit reads service.yaml from the project root. "
     "Keys: name, replicas, timeout, retries, region. Environment variables override keys."},
    {"id": "d03", "title": "Retries and timeouts", "text": "Outgoing calls retry three times with exponential "
     "backoff. The timeout key sets the per-request timeout in seconds (default 30)."},
    {"id": "d04", "title": "Structured logging", "text": "Logs are JSON lines with level, message and "
     "request_id. Set log_level to debug to see request bodies."},
    {"id": "d05", "title": "Caching responses", "text": "The cache stores GET responses for cache_ttl seconds. "
     "Invalidate with orbit cache purge --service NAME."},
    {"id": "d06", "title": "Webhooks", "text": "Register a webhook URL per service; Orbit signs each delivery "
     "with an HMAC header and retries failed deliveries for 24 hours."},
    {"id": "d07", "title": "Authentication tokens", "text": "API tokens are created with orbit token create. "
     "Tokens expire after 90 days; rotate them with orbit token rotate."},
    {"id": "d08", "title": "Database migrations", "text": "Migrations live in migrations/ and run in filename "
     "order during deploy. A failed migration aborts the deploy and keeps the old version."},
    {"id": "d09", "title": "Backups and restore", "text": "Nightly backups are kept 14 days. Restore a backup "
     "with orbit backup restore --id ID into a new database."},
    {"id": "d10", "title": "Scaling replicas", "text": "Set replicas in service.yaml or run orbit scale NAME N. "
     "Autoscaling targets 70 percent CPU by default."},
    {"id": "d11", "title": "Health checks", "text": "Each service exposes /healthz. Orbit restarts a replica "
     "after three failed health checks in a row."},
    {"id": "d12", "title": "Secrets", "text": "Store secrets with orbit secret set KEY VALUE; they are injected "
     "as environment variables and never written to logs."},
    {"id": "d13", "title": "Regions", "text": "Services run in eu-west or us-east. Set region in service.yaml; "
     "moving a service between regions needs a new deploy."},
    {"id": "d14", "title": "Background jobs", "text": "Jobs are submitted with orbit job run and report status "
     "queued, running, done or failed. Poll with orbit job status ID."},
    {"id": "d15", "title": "Rate limits of the public API", "text": "The public API allows 600 requests per "
     "minute per token; exceeding it returns HTTP 429 with a Retry-After header."},
    {"id": "d16", "title": "Feature flags", "text": "Flags are toggled with orbit flag set NAME on or off and "
     "read at request time; changes apply within five seconds."},
]

#: Topics the index knows nothing about, each told in many ways (every wording has a word no doc has).
MISSING = {
    "saml": ["SAML single sign-on setup", "configure SSO with SAML", "saml identity provider integration",
             "how to enable SAML login", "SSO via okta saml", "single sign-on saml metadata xml",
             "SAML assertion consumer service url", "enterprise SSO saml configuration guide",
             "set up saml sso for the dashboard", "saml certificate rotation", "SSO saml troubleshooting",
             "login with corporate SSO saml", "saml attribute mapping", "idp initiated saml sso"],
    "billing": ["billing invoice export", "download invoices as csv billing", "how are invoices generated",
                "billing cycle and invoice dates", "export billing history", "invoice pdf download",
                "change billing email for invoices", "billing api invoices endpoint", "monthly invoice billing",
                "where to find past invoices", "billing statement export", "invoice line items billing",
                "refund on an invoice", "billing currency for invoices"],
    "graphql": ["graphql endpoint", "GraphQL schema introspection", "query services with graphql",
                "graphql api mutations", "graphql subscriptions support", "is there a graphql gateway",
                "graphql pagination cursors", "graphql playground url", "graphql schema download",
                "graphql api authentication", "graphql query depth limit", "graphql federation"],
    "kubernetes": ["kubernetes operator install", "deploy on kubernetes with helm", "k8s operator crd",
                   "kubernetes manifests for orbit", "helm chart values kubernetes", "kubectl apply operator",
                   "kubernetes namespace per service", "run orbit on a k8s cluster", "kubernetes ingress controller",
                   "operator reconciliation kubernetes", "helm upgrade kubernetes operator", "k8s pod security"],
}

FOUND = {  # queries with hits, and paraphrases of them that also hit
    "timeouts": ["timeout retries", "request timeout seconds", "retries backoff"],
    "deploy": ["deploy staging", "deploy command migrations", "orbit deploy"],
    "tokens": ["token rotate", "api tokens expire", "token create"],
    "backups": ["backup restore", "nightly backups", "restore backup database"],
    "jobs": ["job status", "jobs queued running", "poll job status"],
    "scaling": ["scale replicas", "autoscaling cpu", "replicas service"],
    "webhooks": ["webhook retries", "webhook hmac", "webhook delivery"],
    "limits": ["rate limit requests minute", "http 429 retry", "public api requests"],
}

SERVICES = ["billing", "search", "auth", "gateway", "mailer", "reports", "ingest", "images", "notify",
            "audit", "catalog", "orders", "profile", "metrics"]


def service_yaml(name: str, replicas: int = 2, timeout: int = 30) -> str:
    return (f"name: {name}\nreplicas: {replicas}\ntimeout: {timeout}\nretries: 3\nregion: eu-west\n"
            f"log_level: info\n")


def config_files(n: int, offset: int = 0) -> dict[str, str]:
    return {f"config/{s}.yaml": service_yaml(s, 1 + (k % 4), 10 * (1 + k % 5))
            for k, s in enumerate((SERVICES * 2)[offset:offset + n])}


def data_files(n: int) -> dict[str, str]:
    regions = ["north", "south", "east", "west", "central", "coast", "valley", "hills", "lakes", "plains",
               "delta", "ridge", "bay", "harbor", "forest", "desert"]
    return {f"data/{r}.csv": "month,orders,revenue\n" + "".join(
        f"2024-{m:02d},{(k * 7 + m * 13) % 97 + 10},{((k + 3) * (m + 5) * 37) % 9000 + 500}\n" for m in range(1, 4))
        for k, r in enumerate(regions[:n])}


README = ("# shop-tools\n\nSmall helpers used by the shop services. Source in src/, tests in tests/.\n"
          "Run the tests with `python -m pytest -q`.\n")

CHAPTERS = ["intro", "install", "config", "deploy", "scaling", "logging", "backups", "security", "faq",
            "glossary"]


def chapter_files(n: int) -> dict[str, str]:
    return {f"book/{c}.md": f"# {c.title()}\n\n" + " ".join(
        f"Paragraph {p} of the {c} chapter explains one more detail of {c}." for p in range(1, 6)) + "\n"
        for c in CHAPTERS[:n]}


def _fail_total(bugs: list[str]) -> int:
    return sum(MODULES[m].failing for m in bugs)


def _tests_call(b: Builder, i: int, expect, target: str = ""):  # type: ignore[no-untyped-def]
    """The test run as this variant's agent does it: a test tool or a shell command."""
    if i % 2:
        return b.call("shell", expect, command="python -m pytest -q" + (f" {target}" if target else ""))
    return b.call("tests", expect, target=target)


def _fix_one_by_one(b: Builder, i: int, bugs: list[str], words: tuple[str, str, str, str]) -> None:
    """The test run, then per bug read → edit (the fix) → the test run, the failure count falling to 0.

    ``words``: the agent's text at the first test run, the read (``{m}`` names the module), the edit and
    each later test run.
    """
    first, read, edit, again = words
    left = _fail_total(bugs)
    b.turn(_tests_call(b, i, failing(left)), text=first)
    for m in bugs:
        mod = MODULES[m]
        b.turn(b.call("read", contains(mod.bug.strip()), path=mod.path), text=read.format(m=m))
        b.turn(b.call("edit", OK, path=mod.path, old=mod.bug, new=mod.fix), text=edit)
        left -= mod.failing
        b.turn(_tests_call(b, i, failing(left)), text=again)


# -- 1. repeat: the same call with the same result / batches over many files -------------------------------


def repeat_loop(b: Builder, i: int) -> tuple[str, str]:
    b.options = {"files": {**config_files(6), "README.md": README}, "docs": DOCS}
    what = ["read", "shell", "search", "grep"][i % 4]
    for k in range(i % 3):
        b.turn(b.call("ls", hits(1), path="config" if k == 0 else "."), text="Let me look around.")
    if what == "read":
        c = b.call("read", contains("timeout: 20"), path="config/search.yaml")
        desc, task = "re-reads the same config file, same content every time", \
            "What timeout does the search service use? Check its config."
    elif what == "shell":
        c = b.call("shell", contains("retries: 3"), command="grep -n retries config/auth.yaml")
        desc, task = "re-runs the same grep command, same output", "How many retries does auth do?"
    elif what == "search":
        c = b.call("search", hits(1), query=FOUND["tokens"][i % 3])
        desc, task = "repeats the same search, same hits", "How do I rotate API tokens?"
    else:
        c = b.call("grep", hits(1), pattern="log_level", path="config")
        desc, task = "re-runs the same code search, same matches", "Which services log at debug level?"
    n = 9 + (i * 3) % 6
    for k in range(n):
        b.turn(c, text="Let me check that again." if k else "Checking.", loop_start=k == 0)
    b.final("I could not determine the answer reliably.")
    return f"the same call with the same result {n} times ({desc})", task


def repeat_healthy(b: Builder, i: int) -> tuple[str, str]:
    n = 10 + (i * 2) % 6
    files = data_files(n) if i % 2 == 0 else config_files(n, i)
    b.options = {"files": files}
    for path in files:
        b.turn(b.call("read", contains("\n"), path=path), text=f"Reading {path}.")
    if i % 2 == 0:
        summary = "region,total_orders\n" + "".join(f"{p[5:-4]},{sum(int(r.split(',')[1]) for r in t.splitlines()[1:])}\n"
                                                      for p, t in files.items())
        b.turn(b.call("write", OK, path="reports/orders_by_region.csv", content=summary), text="Writing the report.")
        b.final(f"Summed the orders of {n} regions into reports/orders_by_region.csv.")
        return f"reads {n} different data files once each, writes a summary", \
            "Total the orders per region from the files in data/ and write a CSV report."
    b.final(f"Checked {n} service configs; every service has retries: 3.")
    return f"reads {n} different config files once each", "Audit every service config for its retries setting."


# -- 2. search: paraphrased searches that always return nothing / searches that find things ----------------


def search_loop(b: Builder, i: int) -> tuple[str, str]:
    b.options = {"docs": DOCS}
    topic = list(MISSING)[i % len(MISSING)]
    queries = MISSING[topic]
    pre = i % 3
    for k in range(pre):
        b.turn(b.call("search", hits(1), query=list(FOUND.values())[(i + k) % len(FOUND)][0]),
               text="Starting with what I know.")
    n = 10 + i % 4
    for k in range(n):
        b.turn(b.call("search", EMPTY, query=queries[k % len(queries)]),
               text="No luck; trying other words." if k else "Searching for it.", loop_start=k == 0)
    b.final(f"I could not find documentation about {topic}.")
    task = {"saml": "How do I set up SAML single sign-on for Orbit?", "billing": "How can I export our invoices?",
            "graphql": "Does Orbit have a GraphQL API? Find the docs.",
            "kubernetes": "Find how to run Orbit with the Kubernetes operator."}[topic]
    return f"{n} paraphrased searches for a topic the index lacks, all empty", task


def search_healthy(b: Builder, i: int) -> tuple[str, str]:
    b.options = {"docs": DOCS}
    topics = list(FOUND)
    if i % 2:  # a miss or two, then a wording that finds it, then more topics
        misses = MISSING["billing"][: 1 + i % 2]
        for q in misses:
            b.turn(b.call("search", EMPTY, query=q), text="Searching.")
    n = 5 + i % 4
    for k in range(n):
        t = topics[(i + k) % len(topics)]
        b.turn(b.call("search", hits(1), query=FOUND[t][k % 3]), text=f"Looking up {t}.")
    b.final("Here is a summary of deploys, timeouts, tokens and the other topics you asked about.")
    return f"{n} searches on different topics, each with hits", \
        "Write me a one-page cheat sheet of Orbit operations (deploys, timeouts, tokens, jobs...)."


# -- 3. test_fix: read → edit → test with the same failure / a falling failure count -------------------------


def test_fix_loop(b: Builder, i: int) -> tuple[str, str]:
    mod = MODULES[["pricing", "slug", "stats", "inventory", "temps", "retry"][i % 6]]
    b.options = {"modules": ["pricing", "slug", "stats", "inventory", "temps", "retry", "cart"], "bugs": [mod.name]}
    same = i % 2 == 0
    b.turn(_tests_call(b, i, failing(mod.failing)), text="Running the tests first.")
    cycles = 4 + i % 2
    line = mod.bug
    for k in range(cycles):
        b.turn(b.call("read", contains(line.strip()), path=mod.path), text="Reading the module.",
               loop_start=k == 0)
        if same:  # writes the same wrong version every time
            b.turn(b.call("write", OK, path=mod.path, content=mod.with_line(mod.wrong[0])), text="Fixing it.")
            line = mod.wrong[0]
        else:  # tries a different wrong edit every time (cycling)
            options = [mod.bug, *mod.wrong]
            nxt = options[(options.index(line) + 1) % len(options)]
            b.turn(b.call("edit", OK, path=mod.path, old=line, new=nxt), text="Trying another fix.")
            line = nxt
        b.turn(_tests_call(b, i, failing(mod.failing)), text="Re-running the tests.")
    b.final("The test still fails; I could not fix it.")
    return (f"read → {'rewrite with the same content' if same else 'a different wrong edit'} → tests, "
            f"{cycles} times, same failure"), f"The tests for {mod.name} fail. Fix the bug."


def test_fix_healthy(b: Builder, i: int) -> tuple[str, str]:
    names = list(MODULES)
    bugs = [names[(i * 3 + k) % len(names)] for k in range(3 + i % 2)]
    b.options = {"modules": sorted(set(bugs) | {"pricing", "cart"}), "bugs": bugs}
    _fix_one_by_one(b, i, bugs, ("Running the tests.", "Looking at {m}.", "Fixing it.", "Re-running the tests."))
    b.final(f"Fixed {len(bugs)} bugs; all tests pass.")
    return f"{len(bugs)} bugs fixed one by one, the failure count falls to 0", "Make the test suite pass."


# -- 4. edits: edit/revert back and forth / writes of many files with similar content -----------------------


def edits_loop(b: Builder, i: int) -> tuple[str, str]:
    mod = MODULES[["pricing", "stats", "temps", "retry", "inventory"][i % 5]]
    b.options = {"modules": [mod.name, "cart", "slug"], "bugs": [mod.name]}
    b.turn(b.call("read", contains(mod.bug.strip()), path=mod.path), text="Reading the module.")
    with_tests = i % 2 == 0
    a, c = mod.bug, mod.wrong[0]
    rounds = 3 if with_tests else 5
    first = True
    for _ in range(rounds):
        for old, new in ((a, c), (c, a)):
            if i % 3 == 2:
                call = b.call("write", OK, path=mod.path, content=mod.with_line(new))
            else:
                call = b.call("edit", OK, path=mod.path, old=old, new=new)
            b.turn(call, text="Changing it back." if new == a else "Changing this line.", loop_start=first)
            first = False
            if with_tests:
                b.turn(_tests_call(b, i, failing(mod.failing)), text="Testing.")
    b.final("Neither version works.")
    return (f"edits a line and reverts it, {rounds} times{', testing after each' if with_tests else ''}",
            f"Fix the failing test in {mod.name}.")


def edits_healthy(b: Builder, i: int) -> tuple[str, str]:
    n = 10 + i % 4
    services = (SERVICES * 2)[i:i + n]
    if i % 2 == 0:
        b.options = {}
        for s in services:
            b.turn(b.call("write", OK, path=f"deploy/{s}.yaml", content=service_yaml(s, 2, 30)),
                   text=f"Writing the manifest for {s}.")
        b.turn(b.call("ls", hits(n), path="deploy"), text="Checking the result.")
        b.final(f"Created {n} deploy manifests.")
        return f"writes {n} different files with near-identical content", \
            "Create a deploy manifest for each service (2 replicas, 30 s timeout)."
    b.options = {"files": {f"config/{s}.yaml": service_yaml(s) for s in services}}
    for s in services:
        b.turn(b.call("edit", OK, path=f"config/{s}.yaml", old="log_level: info", new="log_level: warning"),
               text=f"Updating {s}.")
    b.turn(b.call("grep", EMPTY, pattern="log_level: info", path="config"), text="Verifying.")
    b.final(f"Set log_level to warning in {n} configs.")
    return f"the same edit applied to {n} different files", "Lower the log level of every service to warning."


# -- 5. alternating: two tools alternating with constant / changing results -----------------------------------


def alternating_loop(b: Builder, i: int) -> tuple[str, str]:
    pairs = i % 3
    if pairs == 0:
        b.options = {"jobs": {"build-7": ["running"]}, "files": {"logs/build-7.log": "step 3/5: compiling assets\n"}}
        x = b.call("status", status("running"), job_id="build-7")
        y = b.call("read", contains("step 3/5"), path="logs/build-7.log")
        desc, task = "job status and its log, alternating, neither changes", "Wait for build-7 and report the result."
    elif pairs == 1:
        b.options = {"modules": ["pricing", "cart"], "bugs": ["pricing"], "files": {"README.md": README}}
        x = b.call("ls", hits(1), path="src")
        y = b.call("read", contains("apply_discount"), path="src/pricing.py")
        desc, task = "lists a directory and reads the same file, alternating", "Find where discounts are computed and fix them."
    else:
        b.options = {"docs": DOCS, "files": config_files(4)}
        x = b.call("search", hits(1), query="timeout retries")
        y = b.call("read", contains("timeout:"), path="config/billing.yaml")
        desc, task = "searches the docs and reads a config, alternating, same results", \
            "Is the billing timeout consistent with the documented default?"
    if i % 2:
        b.turn(b.call("ls", hits(1), path="."), text="Let me see what is here.")
    n = 5 + i % 3
    for k in range(n):
        b.turn(x, text="Checking.", loop_start=k == 0)
        b.turn(y, text="And again.")
    b.final("I could not finish this.")
    return f"{desc} ({2 * n} calls)", task


def alternating_healthy(b: Builder, i: int) -> tuple[str, str]:
    n = 6 + i % 3
    if i % 2 == 0:
        files = chapter_files(n)
        b.options = {"files": files}
        for path in files:
            b.turn(b.call("read", contains("Paragraph 1"), path=path), text="Reading the next chapter.")
            name = path.split("/")[1]
            b.turn(b.call("write", OK, path=f"summaries/{name}",
                          content=f"Summary of {name[:-3]}: five paragraphs on {name[:-3]}.\n"), text="Summarising.")
        b.final(f"Summarised {n} chapters.")
        return f"reads a chapter and writes its summary, alternating, {n} different chapters", \
            "Write a short summary of each chapter in book/."
    ids = [f"job-{k + 1}" for k in range(n)]
    b.options = {"jobs": {j: ["done"] for j in ids}, "job_results": {j: f"{k * 11 + 3} rows exported" for k, j in enumerate(ids)},
                 "records": {j: (f"export {j}: owner=team-{k % 3}", 0, "") for k, j in enumerate(ids)}}
    for j in ids:
        b.turn(b.call("status", status("done"), job_id=j), text=f"Checking {j}.")
        b.turn(b.call("fetch", contains(j), record_id=j), text="Fetching its details.")
    b.final(f"All {n} exports are done.")
    return f"job status and record fetch alternating over {n} different jobs", "Report on each nightly export job."


# -- 6. multi_agent: ping-pong without progress / handoffs with progress ---------------------------------------

ROLES = [("coder", "reviewer"), ("developer", "tester"), ("fixer", "qa"), ("engineer", "critic")]


def multi_agent_loop(b: Builder, i: int) -> tuple[str, str]:
    a, r = ROLES[i % len(ROLES)]
    mod = MODULES[["pricing", "temps", "retry", "slug"][i % 4]]
    b.options = {"modules": [mod.name, "cart"], "bugs": [mod.name]}
    b.agent = a
    b.agents = {a: f"You are the {a}. Change the code, then hand over to the {r}.",
                r: f"You are the {r}. Run the tests and send the work back to the {a} if they fail."}
    b.turn(b.call("read", contains(mod.bug.strip()), path=mod.path), text="Reading the code.", agent=a)
    b.handoff(r, "Please run the tests so I can see the failure.", agent=a)
    b.turn(_tests_call(b, i, failing(mod.failing)), text="Running the tests.", agent=r)
    b.handoff(a, f"{mod.failing} failing; please fix {mod.name}.", agent=r)
    rounds = 5 + i % 2
    for k in range(rounds):
        b.turn(b.call("write", OK, path=mod.path, content=mod.with_line(mod.wrong[0])), text="Applying my fix.",
               agent=a, loop_start=k == 0)
        b.handoff(r, "Fixed, please re-test.", agent=a)
        b.turn(_tests_call(b, i, failing(mod.failing)), text="Running the tests.", agent=r)
        b.handoff(a, f"Still {mod.failing} failing, same error. Please fix it.", agent=r)
    b.final("We could not get the tests to pass.", agent=a)
    return f"{a} and {r} hand the same patch and the same failure back and forth {rounds} times", \
        f"Fix the failing tests of {mod.name} (the {r} checks the {a}'s work)."


def multi_agent_healthy(b: Builder, i: int) -> tuple[str, str]:
    a, r = ROLES[(i + 1) % len(ROLES)]
    names = list(MODULES)
    bugs = [names[(i * 5 + k) % len(names)] for k in range(3)]
    b.options = {"modules": [*bugs, "cart"], "bugs": bugs, "docs": DOCS}
    b.agent = a
    b.agents = {a: f"You are the {a}. Fix one module at a time, then ask the {r} to verify.",
                r: f"You are the {r}. Run the tests and report what is left to the {a}."}
    left = _fail_total(bugs)
    for k, m in enumerate(bugs):
        mod = MODULES[m]
        b.turn(b.call("read", contains(mod.bug.strip()), path=mod.path), text=f"Reading {m}.", agent=a)
        b.turn(b.call("edit", OK, path=mod.path, old=mod.bug, new=mod.fix), text="Fixing it.", agent=a)
        b.handoff(r, f"Fixed {m}; please verify.", agent=a)
        left -= mod.failing
        b.turn(_tests_call(b, i, failing(left)), text="Running the tests.", agent=r)
        if k < len(bugs) - 1:
            b.handoff(a, f"{left} failing now; next one please.", agent=r)
    b.final("All tests pass.", agent=r)
    return f"{a} fixes, {r} verifies: three handoffs round trips, the failure count falls to 0", \
        "Fix the failing modules; the reviewer signs off when the suite passes."


# -- 7. polling: never completes / completes -------------------------------------------------------------------


def polling_loop(b: Builder, i: int) -> tuple[str, str]:
    job = ["deploy-42", "export-9", "reindex-3", "backup-17"][i % 4]
    b.options = {"jobs": {job: ["running"]}, "files": {"README.md": README}, "docs": DOCS}
    if i % 2:
        b.turn(b.call("search", hits(1), query="job status"), text="Checking how jobs report status.")
        b.turn(b.call("read", contains("shop-tools"), path="README.md"), text="And the README.")
    n = 10 + i % 5
    for k in range(n):
        b.turn(b.call("status", status("running"), job_id=job), text="Still waiting." if k else "Polling the job.",
               loop_start=k == 0)
    b.final(f"{job} is still running; I will stop waiting.")
    return f"polls a job {n} times, it stays running", f"Wait until job {job} finishes and tell me its result."


def polling_healthy(b: Builder, i: int) -> tuple[str, str]:
    schedules = [["queued", "running", "running", "done"], ["queued", "queued", "running", "running", "running", "done"],
                 ["running", "running", "done"], ["queued", "running", "running", "running", "done"]]
    job = ["deploy-43", "export-10", "reindex-4", "backup-18"][i % 4]
    sched = schedules[i % 4]
    b.options = {"jobs": {job: sched}, "job_results": {job: "finished: 1,204 items"}, "files": {"README.md": README}}
    for k, s in enumerate(sched):
        b.turn(b.call("status", status(s), job_id=job), text="Polling." if k else "Checking the job.")
    if i % 2:
        b.turn(b.call("read", contains("shop-tools"), path="README.md"), text="Noting the result.")
    b.final(f"{job} finished: 1,204 items.")
    return f"polls a job {len(sched)} times: {' → '.join(dict.fromkeys(sched))}", \
        f"Wait for job {job} and report its result."


# -- 8. long runs: a loop after productive work / 40+ productive calls -------------------------------------------


def late_loop(b: Builder, i: int) -> tuple[str, str]:
    files = config_files(6 + i % 3)
    mod = MODULES[["stats", "pricing", "temps", "inventory"][i % 4]]
    b.options = {"files": {**files, "README.md": README}, "modules": [mod.name, "cart", "slug"], "bugs": [mod.name],
                 "docs": DOCS}
    productive = 0
    b.turn(b.call("ls", hits(1), path="config"), text="Listing the configs.")
    productive += 1
    for path in files:
        b.turn(b.call("read", contains("replicas"), path=path), text=f"Reading {path}.")
        productive += 1
    for k in range(10 - productive if productive < 10 else 1):
        b.turn(b.call("search", hits(1), query=list(FOUND.values())[k % len(FOUND)][1]), text="Checking the docs.")
    kind = i % 3
    if kind == 0:  # stuck test-fix cycle
        b.turn(_tests_call(b, i, failing(mod.failing)), text="Now the tests.", loop_start=True)
        for _ in range(4):
            b.turn(b.call("write", OK, path=mod.path, content=mod.with_line(mod.wrong[0])), text="Fixing.")
            b.turn(_tests_call(b, i, failing(mod.failing)), text="Testing.")
        desc = "a write/test cycle with the same failure"
    elif kind == 1:  # empty searches
        for k, q in enumerate(MISSING["graphql"][:10]):
            b.turn(b.call("search", EMPTY, query=q), text="Searching.", loop_start=k == 0)
        desc = "paraphrased searches that all come back empty"
    else:  # alternating reads
        first = next(iter(files))
        for k in range(5):
            b.turn(b.call("read", contains("replicas"), path=first), text="Re-reading.", loop_start=k == 0)
            b.turn(b.call("ls", hits(1), path="config"), text="Listing again.")
        desc = "a read and a listing alternating with constant results"
    b.final("I am not making progress.")
    return f"10+ productive calls, then {desc}", "Review the service configs against the docs, then fix the tests."


def long_healthy(b: Builder, i: int) -> tuple[str, str]:
    names = list(MODULES)
    if i % 2 == 0:
        bugs = names[:13] if i % 4 == 0 else names[1:14]
        b.options = {"modules": names, "bugs": bugs}
        _fix_one_by_one(b, i, bugs, ("Running the whole suite.", "Reading {m}.", "Fixing.", "Re-running the suite."))
        b.turn(b.call("write", OK, path="CHANGELOG.md", content="Fixed: " + ", ".join(bugs) + ".\n"),
               text="Noting the fixes.")
        b.final(f"Fixed {len(bugs)} modules; the suite passes.")
        return f"fixes {len(bugs)} modules one by one ({3 * len(bugs) + 2} calls), failures fall to 0", \
            "Fix every failing test in the project."
    files = data_files(14)
    b.options = {"files": files}
    b.turn(b.call("ls", hits(14), path="data"), text="Listing the data.")
    for path, text in files.items():
        b.turn(b.call("read", contains("month,orders"), path=path), text=f"Reading {path}.")
        total = sum(int(r.split(",")[2]) for r in text.splitlines()[1:])
        report = f"reports/{path[5:-4]}.txt"
        b.turn(b.call("write", OK, path=report, content=f"{path[5:-4]}: revenue {total}\n"),
               text="Writing its report.")
        b.turn(b.call("grep", hits(1), pattern=f"revenue {total}$", path=report), text="Verifying it.")
    b.turn(b.call("ls", hits(14), path="reports"), text="Checking.")
    b.final("Wrote 14 regional revenue reports.")
    return "reads 14 data files, writes and verifies 14 reports (44 calls)", \
        "Write a revenue report per region from data/."


# -- 9. retry: transient errors then success / the same error forever --------------------------------------------

ERRORS = ["503 Service Unavailable: upstream busy, retry later", "connection refused (records-api:8080)",
          "429 Too Many Requests", "timeout after 30s waiting for records-api"]


def retry_loop(b: Builder, i: int) -> tuple[str, str]:
    msg = ERRORS[i % len(ERRORS)]
    good = [f"R-{100 + k}" for k in range(i % 3)]
    bad = f"R-{200 + i}"
    b.options = {"records": {**{r: (f"record {r}: amount=42.00 EUR", 0, "") for r in good}, bad: ("", -1, msg)}}
    for r in good:
        b.turn(b.call("fetch", contains(r), record_id=r), text=f"Fetching {r}.")
    n = 9 + i % 4
    for k in range(n):
        b.turn(b.call("fetch", error(msg.split(":")[0]), record_id=bad), text="Retrying." if k else f"Fetching {bad}.",
               loop_start=k == 0)
    b.final(f"The service keeps failing for {bad}.")
    return f"retries a call that fails the same way {n} times", f"Fetch records {', '.join([*good, bad])} and total them."


def retry_healthy(b: Builder, i: int) -> tuple[str, str]:
    msg = ERRORS[(i + 1) % len(ERRORS)]
    ids = [f"R-{300 + 10 * i + k}" for k in range(5 + i % 3)]
    fails = {r: (2 if k == 1 else 1 if k in (3, 5) else 0) for k, r in enumerate(ids)}
    b.options = {"records": {r: (f"record {r}: amount={10 + k}.50 EUR", fails[r], msg) for k, r in enumerate(ids)}}
    for r in ids:
        for _ in range(fails[r]):
            b.turn(b.call("fetch", error(msg.split(":")[0]), record_id=r), text=f"Fetching {r}.")
        b.turn(b.call("fetch", contains(r), record_id=r), text="Retrying." if fails[r] else f"Fetching {r}.")
    b.final(f"Fetched all {len(ids)} records.")
    return f"fetches {len(ids)} records; transient errors on some, each retry succeeds", "Total the amounts of the records."


# -- 10. rerun: the same test command after an edit, result changes / unchanged ------------------------------------


def rerun_loop(b: Builder, i: int) -> tuple[str, str]:
    mod = MODULES[["grades", "units", "paging", "dates"][i % 4]]
    b.options = {"modules": [mod.name, "cart", "pricing"], "bugs": [mod.name]}
    b.turn(b.call("read", contains("def test"), path=mod.test_path), text="Reading the test.")
    n = 9 + i % 4
    for k in range(n):
        b.turn(_tests_call(b, i, failing(mod.failing), target=mod.test_path),
               text="Maybe it is flaky; running it again." if k else "Running it.", loop_start=k == 0)
    b.final("The test fails every time.")
    return f"re-runs the same failing test {n} times without changing anything", f"The {mod.name} test fails in CI. Check it."


def rerun_healthy(b: Builder, i: int) -> tuple[str, str]:
    names = ["inventory", "emails", "pricing", "temps", "retry", "slug"]
    bugs = [names[(i + k) % len(names)] for k in range(2 + i % 2)]
    b.options = {"modules": [*bugs, "cart"], "bugs": bugs}
    left = _fail_total(bugs)
    b.turn(_tests_call(b, 1, failing(left)), text="Running the suite.")
    for m in bugs:
        mod = MODULES[m]
        b.turn(b.call("edit", OK, path=mod.path, old=mod.bug, new=mod.fix), text=f"Fixing {m}.")
        left -= mod.failing
        b.turn(_tests_call(b, 1, failing(left)), text="Same command again.")
    b.final("Suite passes.")
    return f"the same test command after each of {len(bugs)} edits, the result changes each time", \
        "Get the tests green."


# -- 11. parallel: the same parallel batch repeated / parallel calls over different targets ----------------------


def parallel_loop(b: Builder, i: int) -> tuple[str, str]:
    mod = MODULES[["pricing", "stats", "cart"][i % 3]]
    b.options = {"modules": [mod.name, "slug"], "bugs": [mod.name], "jobs": {"ci-5": ["running"]}}
    batch = (b.call("read", contains(mod.bug.strip()), path=mod.path),
             b.call("tests" if i % 2 == 0 else "status", failing(mod.failing) if i % 2 == 0 else status("running"),
                    **({"target": ""} if i % 2 == 0 else {"job_id": "ci-5"})))
    n = 5 + i % 3
    for k in range(n):
        b.turn(*batch, text="Checking both.", loop_start=k == 0)
    b.final("Nothing changed.")
    return f"the same two parallel calls {n} times, same results", "Find out why CI is red."


def parallel_healthy(b: Builder, i: int) -> tuple[str, str]:
    if i % 2 == 0:
        files = config_files(12, i)
        b.options = {"files": files}
        paths = list(files)
        width = 3 + i % 2
        for k in range(0, len(paths), width):
            b.turn(*(b.call("read", contains("replicas"), path=p) for p in paths[k:k + width]), text="Reading a batch.")
        b.turn(*(b.call("write", OK, path=f"notes/{p[7:-5]}.txt", content=f"{p[7:-5]}: reviewed\n")
                 for p in paths[:4]), text="Writing notes.")
        b.final("Reviewed twelve configs.")
        return f"{len(paths)} config reads in parallel batches of {width}, then parallel writes", \
            "Review the service configs and note which you checked."
    jobs = {f"sync-{k}": ["queued", "running", "done"] if k % 2 else ["running", "done"] for k in range(4)}
    b.options = {"jobs": jobs, "job_results": {j: f"{j} synced" for j in jobs}}
    rnd = 0
    pending = dict(jobs)
    while pending:
        b.turn(*(b.call("status", status(s[min(rnd, len(s) - 1)]), job_id=j) for j, s in pending.items()),
               text="Checking all jobs.")
        rnd += 1
        pending = {j: s for j, s in pending.items() if rnd < len(s)}
    b.final("All four syncs are done.")
    return "polls four jobs in parallel until each is done", "Wait for the four sync jobs."


# -- 12. exploration: a cycle over a few calls / many different tools -----------------------------------------------


def exploration_loop(b: Builder, i: int) -> tuple[str, str]:
    b.options = {"modules": ["pricing", "cart", "slug", "stats"], "bugs": ["pricing"], "files": {"README.md": README},
                 "docs": DOCS}
    b.turn(b.call("read", contains("shop-tools"), path="README.md"), text="Reading the README.")
    if i % 2:
        b.turn(b.call("search", hits(1), query="deploy staging"), text="And the docs.")
    cycle = [b.call("ls", hits(1), path="src"), b.call("grep", hits(1), pattern="def ", path="src/pricing.py"),
             b.call("read", contains("def "), path="src/cart.py" if i % 3 else "src/pricing.py")]
    rounds = 4 + i % 2
    for k in range(rounds):
        for j, c in enumerate(cycle):
            b.turn(c, text="Looking again.", loop_start=k == 0 and j == 0)
    b.final("I could not find the cause.")
    return f"cycles over the same three calls {rounds} times", "Find where the discount bug comes from."


def exploration_healthy(b: Builder, i: int) -> tuple[str, str]:
    b.options = {"modules": ["pricing", "cart", "slug", "stats", "units"], "bugs": ["stats"], "docs": DOCS,
                 "files": {"README.md": README, **config_files(3)}}
    calls = [
        ("ls", hits(1), {"path": "."}), ("read", contains("shop-tools"), {"path": "README.md"}),
        ("ls", hits(1), {"path": "src"}), ("grep", hits(1), {"pattern": "def ", "path": "src"}),
        ("read", contains("mean"), {"path": "src/stats.py"}), ("read", contains("def test_mean"), {"path": "tests/test_stats.py"}),
        ("search", hits(1), {"query": "retries backoff"}), ("read", contains("timeout"), {"path": "config/billing.yaml"}),
        ("shell", contains("src/"), {"command": "wc -l src/*.py"}), ("tests", failing(1), {"target": ""}),
        ("edit", OK, {"path": "src/stats.py", "old": MODULES["stats"].bug, "new": MODULES["stats"].fix}),
        ("tests", failing(0), {"target": ""}),
        ("write", OK, {"path": "NOTES.md", "content": "stats.mean divided by n+1; fixed.\n"}),
    ]
    for kind, exp, kw in calls[: 11 + i % 3] if i % 3 == 2 else calls:
        b.turn(b.call(kind, exp, **kw), text="Exploring.")
    b.final("Found and fixed the bug in stats.mean.")
    return "explores with many different tools, then fixes a bug", "Get to know this repo and fix whatever is broken."


Generator = Callable[[Builder, int], tuple[str, str]]

#: class -> (loop generator, healthy generator)
CLASSES: dict[str, tuple[Generator, Generator]] = {
    "repeat": (repeat_loop, repeat_healthy),
    "search": (search_loop, search_healthy),
    "test_fix": (test_fix_loop, test_fix_healthy),
    "edits": (edits_loop, edits_healthy),
    "alternating": (alternating_loop, alternating_healthy),
    "multi_agent": (multi_agent_loop, multi_agent_healthy),
    "polling": (polling_loop, polling_healthy),
    "long_run": (late_loop, long_healthy),
    "retry": (retry_loop, retry_healthy),
    "rerun": (rerun_loop, rerun_healthy),
    "parallel": (parallel_loop, parallel_healthy),
    "exploration": (exploration_loop, exploration_healthy),
}

#: runs per (class, label)
RUNS_PER_KIND = 4
EXTRA = {("test_fix", "loop"): 2, ("search", "loop"): 1, ("multi_agent", "healthy"): 1, ("multi_agent", "loop"): 1,
         ("retry", "loop"): 2, ("retry", "healthy"): 1}


def catalog() -> dict[str, Scenario]:
    """Every run of the corpus by id, with its dialect."""
    out: dict[str, Scenario] = {}
    k = 0
    for cls, gens in CLASSES.items():
        for label, gen in zip(("loop", "healthy"), gens, strict=True):
            n = RUNS_PER_KIND + EXTRA.get((cls, label), 0)
            for i in range(n):
                dialect = DIALECTS[(k + i) % len(DIALECTS)]
                sid = f"{cls}-{label}-{i + 1:02d}"
                b = Builder(sid, cls, label, i + k)
                desc, task = gen(b, i)
                sc = b.build(desc, task)
                sc.dialect = dialect
                sc.id = f"{dialect}.{sid}"
                out[sc.id] = sc
            k += 1
    return out
