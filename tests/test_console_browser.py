"""The operator console in a real browser: Debian's Chromium driven by Playwright, against ``otelloop serve``
fed by agents instrumented with the real OpenTelemetry SDK.

What a person sees is asserted: the looping session once in the alerts panel with its verdict and loop badge,
its findings with evidence, suggested actions and the call that repeated, its recent steps with argument and
result excerpts, Pause then Resume (checked through the API), a hostile tool name shown as text without running
anything, a new alert arriving without a reload; who and when, hints for missing settings and explanations on
hover; sorting, filters and the detail in view; the ended state; acknowledging an alert; an 800 px window.
Screenshots are saved in the test's tmp directory.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import extras
import pytest
from console_agents import (
    HOSTILE_TOOL,
    SECRET,
    healthy_agent,
    hostile_agent,
    looping_agent,
    support_agent_without_content,
)
from served import wait_for

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]
TOKEN = "console-admin-token-4f1d"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TRACE_URL = "http://jaeger.example:16686/trace/{trace_id}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Both are installed by .ci/run (apt-get install chromium; pip install '.[test]'), which sets
    # OTELLOOP_REQUIRE_EXTRAS: there a missing browser fails; on a development machine it skips, saying so.
    from playwright.sync_api import sync_playwright

    if not shutil.which(CHROMIUM):
        reason = f"the console's browser tests need {CHROMIUM}: apt-get install -y chromium"
        if extras.required():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.dialogs = []  # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    yield pg
    context.close()


def verdict(served: Any, session: str) -> str:
    code, body = served.get(f"/v1/sessions/{session}", AUTH)
    assert code == 200, body
    return json.loads(body)["verdict"]


def test_console_shows_stuck_sessions_live_and_pauses_one(serve: Any, page: Any, tmp_path: Path) -> None:
    # every detector's evidence, also on what the agent repeats after its stop (the hold off; held steps:
    # test_console_shows_the_steps_held_since_the_stop)
    served = serve({"admin": {"token": TOKEN}, "console": {"trace_url": TRACE_URL},
                    "state": {"hold_stopped_sessions": False}})
    looping = looping_agent(served.grpc)
    healthy = healthy_agent(served.grpc)
    hostile = hostile_agent(served.grpc)

    # The page itself holds no data; it asks for the token once and keeps it for this tab only.
    page.goto(f"http://{served.admin}/")
    page.get_by_label("Admin token").fill(TOKEN)
    page.get_by_role("button", name="Unlock").click()
    alerts = page.locator("#alerts > li")
    looping_alert = page.locator(f'#alerts > li[data-session="{looping}"]')
    looping_alert.wait_for()
    page.locator("#live.on").wait_for()
    page.screenshot(path=str(tmp_path / "1-overview.png"), full_page=True)
    assert page.evaluate("document.cookie") == ""
    assert page.evaluate("sessionStorage.getItem('otelloop.adminToken')") == TOKEN
    assert TOKEN not in page.url

    # Alerts: each alerting session once, however many findings it had; the healthy one is not there.
    assert looping_alert.count() == 1
    assert page.locator(f'#alerts > li[data-session="{healthy}"]').count() == 0
    assert alerts.count() == 2
    assert looping_alert.locator(".chip.verdict-stop").inner_text() == "stop"
    assert looping_alert.locator(".badge.loop").inner_text() == "Loop 3/8"
    count_text = looping_alert.locator(".alert-count").inner_text()
    assert count_text.endswith("alerts") and int(count_text.split()[0]) > 1

    # Sessions table: most severe first, the healthy session last with its verdict.
    rows = page.locator("#sessions tbody tr")
    assert rows.count() == 3
    assert rows.nth(2).get_attribute("data-session") == healthy
    assert rows.nth(2).locator(".chip").first.inner_text() == "continue"
    assert page.locator('#counts button[data-verdict="stop"] strong').inner_text() == "2"

    # Session detail: findings with their evidence and suggested actions, steps, history, trace link.
    looping_alert.get_by_role("button", name="Inspect", exact=True).click()
    detail = page.locator("#detail")
    detail.locator("li.finding").first.wait_for()
    halted = detail.locator("li.finding", has_text="otelloop.loop_halted")
    assert "stalled" in halted.locator(".message").inner_text()
    assert halted.locator("dl.evidence dt", has_text="halt_reason").count() == 1
    assert [t.strip() for t in halted.locator(".suggested li").all_inner_texts()] == \
        ["switch_to_interactive", "tighten_context", "spawn_reviewer"]
    drift = detail.locator("li.finding", has_text="otelloop.drift")
    assert "Bearer ***" in drift.locator(".message").inner_text()
    assert detail.locator("table.steps tbody tr").count() >= 18
    assert "search_web" in detail.locator("table.steps tbody").inner_text()
    assert detail.locator("ol.history li").count() >= 1
    assert detail.get_by_role("link", name="Open trace ↗").get_attribute("href") == \
        TRACE_URL.replace("{trace_id}", looping)
    assert SECRET not in page.content()
    page.screenshot(path=str(tmp_path / "2-detail.png"), full_page=True)

    # A stopped session offers Resume (lift the stop), not Pause.
    assert looping_alert.get_by_role("button", name="Pause and Inspect").count() == 0
    assert detail.get_by_role("button", name="Pause").count() == 0
    # Pause a running session from its detail, then Resume: the API reports each, and a paused session's
    # agent is told why.
    page.locator(f'#sessions tbody tr[data-session="{healthy}"]').click()
    detail.locator(".detail-head", has_text=healthy[:16]).wait_for()
    detail.get_by_role("button", name="Pause", exact=True).click()
    wait_for(lambda: verdict(served, healthy) == "paused", what="session paused")
    page.locator(f'#sessions tbody tr[data-session="{healthy}"] .chip.verdict-paused').wait_for()
    detail.locator(".verdict-message", has_text="An operator paused this session").wait_for()
    page.screenshot(path=str(tmp_path / "3-paused.png"), full_page=True)
    detail.get_by_role("button", name="Resume").click()
    wait_for(lambda: verdict(served, healthy) == "continue", what="session resumed")
    page.locator(f'#sessions tbody tr[data-session="{healthy}"] .chip.verdict-continue').wait_for()
    detail.get_by_role("button", name="Close").click()

    # The hostile tool name is text: shown verbatim, no element created from it, no script run.
    hostile_alert = page.locator(f'#alerts > li[data-session="{hostile}"]')
    assert HOSTILE_TOOL in hostile_alert.inner_text()
    hostile_alert.get_by_role("button", name="Inspect", exact=True).click()
    page.locator("#detail table.steps", has_text=HOSTILE_TOOL).wait_for()
    assert page.locator("img").count() == 0 and page.locator("#detail script, #alerts script").count() == 0
    assert page.evaluate("document.querySelectorAll('[onerror]').length") == 0
    assert page.dialogs == []  # type: ignore[attr-defined]

    # Live: a new looping agent appears in the alerts panel without a reload.
    page.evaluate("window.__notReloaded = true")
    newcomer = looping_agent(served.grpc, service="late-agent")
    page.locator(f'#alerts > li[data-session="{newcomer}"]').wait_for(timeout=10_000)
    assert page.evaluate("window.__notReloaded") is True
    assert page.locator("#alerts > li").first.get_attribute("data-session") == newcomer
    page.screenshot(path=str(tmp_path / "4-live.png"), full_page=True)
    assert page.dialogs == []  # type: ignore[attr-defined]


def test_console_without_a_token_on_loopback_and_disabled(serve: Any, page: Any) -> None:
    served = serve()
    looping = looping_agent(served.grpc)
    page.goto(f"http://{served.admin}/")
    page.locator(f'#alerts > li[data-session="{looping}"]').wait_for()
    assert page.locator("#token-form").is_hidden()

    off = serve({"console": {"enabled": False}})
    assert off.get("/")[0] == 404 and off.get("/console/console.js")[0] == 404
    assert off.get("/v1/sessions")[0] == 200  # the API does not depend on the page


def test_console_shows_how_many_tool_steps_went_unjudged(serve: Any, page: Any) -> None:
    """An agent whose spans carry no content: its session says so, and nothing alerts on it."""
    served = serve()
    session = support_agent_without_content(served.grpc)
    wait_for(lambda: served.metric("otelloop_steps_unjudged_total", {"service": "support-agent"}) == 9,
             what="nine unjudged tool steps counted")
    page.goto(f"http://{served.admin}/")
    row = page.locator(f'#sessions tbody tr[data-session="{session}"]')
    row.click()
    detail = page.locator("#detail")
    unjudged = detail.locator("dd.unjudged")
    unjudged.wait_for()
    assert unjudged.inner_text() == "9"
    assert "content capture" in (unjudged.get_attribute("title") or "")
    assert page.locator("#alerts > li").count() == 0


def test_console_shows_the_steps_held_since_the_stop(serve: Any, page: Any) -> None:
    """Defaults: a stopped agent that goes on sending; its repeats are held, and the detail says how many."""
    served = serve()
    looping = looping_agent(served.grpc)
    page.goto(f"http://{served.admin}/")
    page.locator(f'#sessions tbody tr[data-session="{looping}"]').click()
    held = page.locator("#detail dd.held")
    held.wait_for()
    assert held.inner_text() == "10"  # tests/test_console_api.py: which steps, and why
    assert "no detector judged them" in (held.get_attribute("title") or "")
    assert page.locator("#detail li.finding").count() == 1  # stall's halt; held steps raise none


def _unlock(page: Any, served: Any) -> None:
    page.goto(f"http://{served.admin}/")
    page.get_by_label("Admin token").fill(TOKEN)
    page.get_by_role("button", name="Unlock").click()


def test_console_shows_what_repeated_not_a_hash(serve: Any, page: Any, tmp_path: Path) -> None:
    """Also takes the README's screenshot: ``OTELLOOP_CONSOLE_PNG=docs/console.png pytest -k what_repeated``."""
    served = serve({"admin": {"token": TOKEN}, "console": {"trace_url": TRACE_URL,
                                                             "dashboard_url": "http://grafana:3000/d/otelloop"},
                    "state": {"hold_stopped_sessions": False}})  # the searches after the stop judged too (the hold off)
    healthy_agent(served.grpc, resource={"deployment.environment.name": "staging"})
    support_agent_without_content(served.grpc, reservations=3)
    looping = looping_agent(served.grpc, resource={"deployment.environment.name": "production"})
    _unlock(page, served)
    page.locator(f'#alerts > li[data-session="{looping}"]').get_by_role("button", name="Inspect", exact=True).click()
    detail = page.locator("#detail")
    detail.locator("table.steps").wait_for()
    # Recent steps: arguments and result excerpts, redacted (the bearer token in the command is masked).
    rows = detail.locator("table.steps tbody tr")
    assert rows.count() >= 18
    newest = rows.first
    assert newest.locator("td.args").inner_text() == '{"query":"weather in Paris"}'
    assert newest.locator("td.result").inner_text() == "no results"
    bash = detail.locator("table.steps tbody tr", has_text="bash").first
    assert "Bearer ***" in bash.locator("td.args").inner_text()
    assert "Failed to connect" in bash.locator("td.result").inner_text()
    # A finding shows the call it was raised on and its result, not a hash of the result.
    intervention = detail.locator("li.finding", has_text="otelloop.intervention")
    call = intervention.locator(".call")
    assert call.locator(".call-name").inner_text() == "search_web"
    assert "weather in Paris" in call.locator(".call-args").inner_text()
    assert call.locator(".call-result").inner_text() == "no results"
    assert intervention.locator("dl.evidence dt", has_text="repeated_result").count() == 0
    # The finding text stays current: the count of reports and the detector's current reason.
    assert "reported" in intervention.inner_text()
    assert detail.locator("li.finding .current").count() >= 1
    assert SECRET not in page.content()
    page.set_viewport_size({"width": 1600, "height": 1300})
    page.locator(f'#sessions tbody tr[data-session="{looping}"]').click()
    page.screenshot(path=os.environ.get("OTELLOOP_CONSOLE_PNG") or str(tmp_path / "what-repeated.png"))


def test_console_says_who_and_when_and_what_settings_are_missing(serve: Any, page: Any) -> None:
    served = serve({"admin": {"token": TOKEN}})
    session = support_agent_without_content(served.grpc)
    _unlock(page, served)
    row = page.locator(f'#sessions tbody tr[data-session="{session}"]')
    row.wait_for()
    # Tokens in and out next to cost; no pricing configured: cost unknown, not $0.0000.
    assert row.locator("td.tokens").inner_text() == f"{sum(900 + 40 * i for i in range(10))} / 300"
    assert row.locator("td.cost").inner_text() == "unknown"
    assert "pricing" in (row.locator("td.cost .hint").get_attribute("title") or "")
    assert row.locator("td.ago").inner_text().endswith("s ago")
    row.click()
    detail = page.locator("#detail")
    detail.locator("dd.started").wait_for()
    assert detail.locator("dd.started").inner_text()[:4].isdigit()
    assert "ago)" in detail.locator("dd.last-activity").inner_text()
    assert detail.locator("dd.duration").inner_text().endswith("s")
    assert detail.locator("dt", has_text="Trace id").count() == 1  # the test's sessions are traces
    assert detail.locator(".session-id .mono").inner_text() == session
    assert detail.get_by_role("button", name="Copy").count() == 1
    # Hints for missing settings, and what the numbers mean on hover.
    assert "console.trace_url" in detail.locator(".trace-hint").inner_text()
    assert "console.dashboard_url" in (page.locator("#dashboard .hint").get_attribute("title") or "")
    assert "0 to 5" in (page.locator("#sessions th", has_text="Loop score").get_attribute("title") or "")
    # Chat steps are not "empty": a model call is not judged on its output.
    chats = detail.locator("table.steps tbody tr", has=page.locator("td", has_text="llm"))
    assert chats.count() >= 1
    assert set(chats.locator("td.outcome").all_inner_texts()) == {"–"}


def test_console_shows_the_environment_next_to_the_service(serve: Any, page: Any) -> None:
    """The SDK's resource names the deployment environment: the current attribute, or the one it replaced."""
    served = serve({"admin": {"token": TOKEN}})
    looping = looping_agent(served.grpc, resource={"deployment.environment.name": "production"})
    healthy = healthy_agent(served.grpc, resource={"deployment.environment": "staging"})
    hostile = hostile_agent(served.grpc)  # names none
    _unlock(page, served)
    rows = page.locator("#sessions tbody tr")
    page.locator(f'#sessions tbody tr[data-session="{hostile}"]').wait_for()
    cells = {r.get_attribute("data-session"): r.locator("td.service") for r in rows.all()}
    assert cells[looping].locator(".environment").inner_text() == "production"
    assert cells[looping].inner_text().startswith("research-agent")
    assert cells[healthy].locator(".environment").inner_text() == "staging"
    assert cells[hostile].locator(".environment").count() == 0
    assert "deployment.environment.name" in (page.locator("#sessions th", has_text="Service").get_attribute("title")
                                             or "")
    cells[looping].click()
    detail = page.locator("#detail")
    detail.locator(".detail-head", has_text=looping[:16]).wait_for()
    assert detail.locator("dd.environment").inner_text() == "production"
    assert "deployment.environment.name" in (detail.locator("dt", has_text="Environment").get_attribute("title") or "")
    page.locator(f'#sessions tbody tr[data-session="{hostile}"]').click()
    detail.locator(".detail-head", has_text=hostile[:16]).wait_for()
    assert detail.locator("dd.environment").inner_text() == "–"


def test_console_links_the_dashboard_and_explains_detectors(serve: Any, page: Any) -> None:
    served = serve({"admin": {"token": TOKEN}, "console": {"dashboard_url": "http://grafana.example/d/otelloop"},
                    "state": {"hold_stopped_sessions": False}})  # trajectory's stop after stall's (the hold off)
    looping = looping_agent(served.grpc)
    _unlock(page, served)
    assert page.get_by_role("link", name="Dashboard ↗").get_attribute("href") == "http://grafana.example/d/otelloop"
    alert = page.locator(f'#alerts > li[data-session="{looping}"]')
    assert "loop score reached 3" in (alert.locator(".badge.intervention-stop").get_attribute("title") or "")
    alert.get_by_role("button", name="Inspect", exact=True).click()
    halted = page.locator("#detail li.finding", has_text="otelloop.loop_halted")
    assert "cycle" in (halted.locator(".event").get_attribute("title") or "")


def test_console_sorts_filters_and_opens_the_detail_in_view(serve: Any, page: Any) -> None:
    served = serve({"admin": {"token": TOKEN}})
    looping = looping_agent(served.grpc)
    healthy = healthy_agent(served.grpc)
    _unlock(page, served)
    rows = page.locator("#sessions tbody tr")
    page.locator(f'#sessions tbody tr[data-session="{healthy}"]').wait_for()
    assert rows.first.get_attribute("data-session") == looping  # most severe first
    page.locator('#sessions th button[data-sort="steps"]').click()  # most steps first
    assert rows.first.get_attribute("data-session") == looping
    page.locator('#sessions th button[data-sort="steps"]').click()  # fewest first
    assert rows.first.get_attribute("data-session") == healthy
    assert page.locator("#sessions th[aria-sort=ascending]").count() == 1
    page.locator("#filter-service").select_option("billing-agent")
    assert [r.get_attribute("data-session") for r in rows.all()] == [healthy]
    page.locator("#filter-service").select_option("")
    page.locator("#filter-agent").select_option("research-agent")
    assert [r.get_attribute("data-session") for r in rows.all()] == [looping]
    page.locator("#filter-agent").select_option("")
    page.locator("#filter-within").select_option("300")
    assert rows.count() == 2
    # The detail opens in view (beside the list), whatever the scroll position.
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    rows.first.click()
    detail = page.locator("#detail")
    detail.locator(".detail-head", has_text=healthy[:16]).wait_for()
    box = detail.bounding_box()
    assert box is not None and box["y"] <= 1 and box["x"] > 0
    assert detail.locator("h2").is_visible() and page.locator("#sessions").is_visible()
    page.keyboard.press("Escape")
    assert detail.is_hidden()


def test_ended_sessions_are_shown_ended_without_pause(serve: Any, page: Any) -> None:
    served = serve({"admin": {"token": TOKEN}, "console": {"ended_after": 1}})
    healthy = healthy_agent(served.grpc)
    wait_for(lambda: json.loads(served.get(f"/v1/sessions/{healthy}", AUTH)[1])["ended"], what="session ended")
    _unlock(page, served)
    row = page.locator(f'#sessions tbody tr[data-session="{healthy}"]')
    row.locator(".chip.ended").wait_for()
    row.click()
    detail = page.locator("#detail")
    detail.locator(".detail-head .chip.ended").wait_for()
    assert detail.get_by_role("button", name="Pause").count() == 0


def test_an_alert_can_be_acknowledged(serve: Any, page: Any) -> None:
    served = serve({"admin": {"token": TOKEN}})
    looping = looping_agent(served.grpc)
    _unlock(page, served)
    alert = page.locator(f'#alerts > li[data-session="{looping}"]')
    alert.get_by_role("button", name="Acknowledge").click()
    alert.wait_for(state="detached")
    alerts = json.loads(served.get("/v1/alerts", AUTH)[1])["alerts"]
    assert looping not in [a["session_id"] for a in alerts]
    assert page.locator(f'#sessions tbody tr[data-session="{looping}"]').count() == 1  # still listed


def test_console_is_usable_at_800_pixels(browser: Any, serve: Any, tmp_path: Path) -> None:
    served = serve({"admin": {"token": TOKEN}})
    looping = looping_agent(served.grpc)
    context = browser.new_context(viewport={"width": 800, "height": 900})
    page = context.new_page()
    try:
        _unlock(page, served)
        page.locator(f'#sessions tbody tr[data-session="{looping}"]').wait_for()
        assert page.evaluate("document.documentElement.scrollWidth") <= 800
        page.locator(f'#alerts > li[data-session="{looping}"]').get_by_role("button", name="Inspect",
                                                                           exact=True).click()
        detail = page.locator("#detail")
        detail.locator("li.finding").first.wait_for()
        box = detail.bounding_box()
        assert box is not None and box["x"] >= 0 and box["width"] <= 800
        assert detail.get_by_role("button", name="Close").is_visible()
        page.screenshot(path=str(tmp_path / "800px.png"))
        detail.get_by_role("button", name="Close").click()
        assert detail.is_hidden()
    finally:
        context.close()
