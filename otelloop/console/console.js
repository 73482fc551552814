// otelloop console: which agent sessions are stuck, why, and a button to pause one.
//
// Everything shown here comes from spans, which are untrusted: every value is put on the page with
// textContent / createTextNode, never as HTML. The admin token (when the service has one) is kept in
// sessionStorage for this tab only and sent as a bearer header; it never goes into a URL or a cookie.
// Live updates come from the event stream /v1/events, read with fetch() so that it carries the header.
"use strict";

(function () {
  const TOKEN_KEY = "otelloop.adminToken";
  const ALERT_SEVERITIES = new Set(["warn", "loop", "stop"]);
  const REFRESH_MIN_MS = 1000;   // at most one reload of the lists per second while events arrive
  const FULL_REFRESH_MS = 10000; // steps, cost and last seen change without events
  const PAGE = 100;

  const state = {
    config: null, token: null, verdict: "", query: "", selected: null,
    dirty: false, loading: false, lastLoad: 0, stream: null, stopped: false,
  };

  const $ = (id) => document.getElementById(id);

  // -- DOM helpers: text only ---------------------------------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || (value === false && !key.startsWith("aria-"))) continue;
      if (key === "class") node.className = value;
      else if (key === "onclick") node.addEventListener("click", value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function short(id) {
    return id.length > 16 ? id.slice(0, 16) + "…" : id;
  }

  function timeOf(ms) {
    if (!ms) return "–";
    return new Date(ms).toLocaleTimeString([], {hour12: false});
  }

  function num(value, digits) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
  }

  function verdictChip(verdict) {
    return el("span", {class: "chip verdict-" + verdict}, verdict);
  }

  function badges(s) {
    const out = el("span", {class: "badges"});
    if (s.loop) {
      const text = s.loop.budget ? `Loop ${s.loop.iteration}/${s.loop.budget}` : `Loop ${s.loop.iteration}`;
      out.appendChild(el("span", {class: "badge loop", title: "cycle " + s.loop.cycle_id}, text));
    }
    if (s.intervention && s.intervention !== "observe") {
      out.appendChild(el("span", {class: "badge intervention-" + s.intervention}, "trajectory " + s.intervention));
    }
    return out;
  }

  // -- API ----------------------------------------------------------------------------------------

  function headers() {
    return state.token ? {"Authorization": "Bearer " + state.token} : {};
  }

  async function api(path, options) {
    const response = await fetch(path, Object.assign({headers: headers(), cache: "no-store"}, options || {}));
    if (response.status === 401 || (response.status === 403 && state.config && state.config.auth === "token")) {
      askToken(state.token ? "The token was refused." : "");
      throw new Error("unauthorized");
    }
    if (!response.ok) {
      const text = await response.text();
      throw new Error(`${path}: ${response.status} ${text.slice(0, 200)}`);
    }
    return response.json();
  }

  function showError(message) {
    const node = $("error");
    node.textContent = message || "";
    node.hidden = !message;
  }

  // -- token --------------------------------------------------------------------------------------

  function askToken(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    stopStream();
    $("main").hidden = true;
    $("token-form").hidden = false;
    $("token-error").textContent = message || "";
    $("token-input").focus();
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token-input").value.trim();
    if (!value) return;
    state.token = value;
    sessionStorage.setItem(TOKEN_KEY, value);
    $("token-input").value = "";
    $("token-form").hidden = true;
    start();
  });

  // -- loading ------------------------------------------------------------------------------------

  async function load() {
    if (state.loading) { state.dirty = true; return; }
    state.loading = true;
    state.dirty = false;
    state.lastLoad = Date.now();
    try {
      // max_age: open pages share one computation of each list per second (see docs/console.md)
      const params = new URLSearchParams({limit: String(PAGE), findings: "false", max_age: "1"});
      if (state.verdict) params.set("verdict", state.verdict);
      if (state.query) params.set("q", state.query);
      const [sessions, alerts] = await Promise.all([api("/v1/sessions?" + params), api("/v1/alerts?limit=50&max_age=1")]);
      renderCounts(sessions.counts);
      renderSessions(sessions);
      renderAlerts(alerts.alerts);
      if (state.selected) await loadDetail(state.selected);
      showError("");
    } catch (e) {
      if (e.message !== "unauthorized") showError("Cannot load sessions: " + e.message);
    } finally {
      state.loading = false;
    }
  }

  function renderCounts(counts) {
    const nav = $("counts");
    clear(nav);
    const all = Object.values(counts).reduce((a, b) => a + b, 0);
    const entries = [["", "all", all]].concat(state.config.verdicts.slice().reverse().map((v) => [v, v, counts[v] || 0]));
    for (const [value, label, n] of entries) {
      nav.appendChild(el("button", {
        type: "button", class: "count verdict-" + (value || "all"), "aria-pressed": state.verdict === value,
        "data-verdict": value,
        onclick: () => { state.verdict = value; load(); },
      }, `${label} `, el("strong", {}, String(n))));
    }
  }

  function renderSessions(body) {
    const tbody = document.querySelector("#sessions tbody");
    clear(tbody);
    $("total").textContent = body.total > body.sessions.length ? `(${body.sessions.length} of ${body.total})`
      : `(${body.total})`;
    $("sessions-empty").hidden = body.sessions.length > 0;
    for (const s of body.sessions) {
      const row = el("tr", {"data-session": s.session_id, class: s.session_id === state.selected ? "selected" : "",
                            tabindex: 0, onclick: () => select(s.session_id)},
        el("td", {}, verdictChip(s.verdict), badges(s)),
        el("td", {class: "mono", title: s.session_id}, short(s.session_id)),
        el("td", {class: "name", title: s.agent}, s.agent || "–"),
        el("td", {class: "name", title: s.service}, s.service || "–"),
        el("td", {class: "num"}, num(s.loop_score, 2)),
        el("td", {class: "num"}, num(s.entropy_score, 2),
           s.entropy_severity ? el("span", {class: "chip entropy-" + s.entropy_severity}, s.entropy_severity) : null),
        el("td", {class: "num"}, String(s.steps)),
        el("td", {class: "num"}, "$" + num(s.cost_usd, 4)),
        el("td", {}, timeOf(s.last_seen_unix_nano / 1e6)));
      row.addEventListener("keydown", (e) => { if (e.key === "Enter") select(s.session_id); });
      tbody.appendChild(row);
    }
  }

  function renderAlerts(alerts) {
    const list = $("alerts");
    clear(list);
    $("alerts-empty").hidden = alerts.length > 0;
    for (const a of alerts) {
      const f = a.finding || {};
      list.appendChild(el("li", {class: "alert severity-" + (f.severity || "warn"), "data-session": a.session_id},
        el("div", {class: "alert-head"},
           verdictChip(a.verdict), badges(a),
           el("span", {class: "mono", title: a.session_id}, short(a.session_id)),
           el("span", {class: "agent"}, a.agent || "–"),
           el("span", {class: "muted"}, timeOf(a.alert_time_unix_ms))),
        el("div", {class: "alert-finding"},
           el("span", {class: "chip severity-" + (f.severity || "warn")}, f.severity || ""),
           el("span", {class: "event"}, f.event || ""), " ",
           el("span", {class: "message"}, f.message || "")),
        el("div", {class: "alert-foot"},
           el("span", {class: "muted alert-count"}, a.alerts === 1 ? "1 alert" : `${a.alerts} alerts`),
           el("button", {type: "button", onclick: () => select(a.session_id)}, "Inspect"),
           pauseButton(a))));
    }
  }

  function pauseButton(s) {
    if (s.verdict === "paused") {
      return el("button", {type: "button", class: "resume", onclick: () => act(s.session_id, "resume")}, "Resume");
    }
    return el("button", {type: "button", class: "pause",
                         onclick: () => act(s.session_id, "pause").then(() => select(s.session_id))},
              "Pause and Inspect");
  }

  async function act(sessionId, action) {
    try {
      await api(`/v1/sessions/${encodeURIComponent(sessionId)}/${action}`, {method: "POST"});
      await load();
    } catch (e) {
      if (e.message !== "unauthorized") showError(`Cannot ${action} the session: ` + e.message);
    }
  }

  // -- one session --------------------------------------------------------------------------------

  async function select(sessionId) {
    state.selected = sessionId;
    for (const row of document.querySelectorAll("#sessions tbody tr")) {
      row.classList.toggle("selected", row.getAttribute("data-session") === sessionId);
    }
    await loadDetail(sessionId);
  }

  async function loadDetail(sessionId) {
    let s;
    try {
      s = await api("/v1/sessions/" + encodeURIComponent(sessionId));
    } catch (e) {
      if (e.message === "unauthorized") return;
      renderGone(sessionId);
      return;
    }
    if (state.selected === sessionId) renderDetail(s);
  }

  function renderGone(sessionId) {
    const detail = $("detail");
    clear(detail);
    detail.hidden = false;
    detail.appendChild(el("h2", {id: "detail-title"}, "Session " + short(sessionId)));
    detail.appendChild(el("p", {class: "empty"}, "This session is no longer held (idle or evicted)."));
  }

  function traceLink(s) {
    const template = state.config.trace_url;
    if (!template || !/^https?:\/\//.test(template)) return null;
    if (template.includes("{trace_id}") && !s.trace_id) return null;
    const url = template.split("{trace_id}").join(encodeURIComponent(s.trace_id || ""))
      .split("{session_id}").join(encodeURIComponent(s.session_id));
    return el("a", {href: url, target: "_blank", rel: "noopener noreferrer", class: "trace-link"}, "Open trace ↗");
  }

  function renderDetail(s) {
    const detail = $("detail");
    clear(detail);
    detail.hidden = false;
    detail.appendChild(el("div", {class: "detail-head"},
      el("h2", {id: "detail-title"}, "Session ", el("span", {class: "mono"}, s.session_id)),
      verdictChip(s.verdict), badges(s), pauseButton(s), traceLink(s),
      el("button", {type: "button", class: "close", onclick: () => {
        state.selected = null; detail.hidden = true;
        for (const row of document.querySelectorAll("#sessions tbody tr.selected")) row.classList.remove("selected");
      }}, "Close")));
    detail.appendChild(el("dl", {class: "facts"},
      el("dt", {}, "Agent"), el("dd", {}, s.agent || "–"),
      el("dt", {}, "Service"), el("dd", {}, s.service || "–"),
      el("dt", {}, "Reason"), el("dd", {class: "reason"}, s.reason || "–"),
      el("dt", {}, "Message to the agent"), el("dd", {class: "verdict-message"}, s.message || "–"),
      el("dt", {}, "Loop score"), el("dd", {}, num(s.loop_score, 2)),
      el("dt", {}, "Entropy"), el("dd", {}, num(s.entropy_score, 2) + (s.entropy_severity ? " " + s.entropy_severity : "")),
      el("dt", {}, "Steps"), el("dd", {}, String(s.steps)),
      el("dt", {}, "Unjudged tool steps"),
      el("dd", {class: "unjudged", title: "Tool steps whose spans carried no result and no error message: " +
                "neither progress nor evidence of a loop. Turn content capture on in the agent's instrumentation."},
         String(s.unjudged_steps || 0)),
      el("dt", {}, "Cost"), el("dd", {}, "$" + num(s.cost_usd, 4))));

    const findings = el("ol", {class: "findings"});
    for (const f of s.findings.slice().reverse()) {
      const evidence = el("dl", {class: "evidence"});
      for (const [key, value] of Object.entries(f.evidence || {})) {
        evidence.appendChild(el("dt", {}, key));
        evidence.appendChild(el("dd", {}, String(value)));
      }
      const actions = el("ul", {class: "actions"});
      for (const a of f.suggested_actions || []) actions.appendChild(el("li", {}, a));
      findings.appendChild(el("li", {class: "finding severity-" + f.severity},
        el("div", {},
           el("span", {class: "chip severity-" + f.severity}, f.severity), " ",
           el("strong", {class: "event"}, f.event), " ",
           el("span", {class: "muted"}, `${f.detector} · ×${f.count} · ${timeOf(f.time_unix_ms)}`)),
        el("p", {class: "message"}, f.message || ""),
        evidence.childNodes.length ? evidence : null,
        (f.suggested_actions || []).length ? el("div", {class: "suggested"}, "Suggested actions:", actions) : null));
    }
    detail.appendChild(el("h3", {}, "Findings"));
    detail.appendChild(s.findings.length ? findings : el("p", {class: "empty"}, "No findings."));

    const steps = el("tbody");
    for (const step of s.recent_steps.slice().reverse()) {
      steps.appendChild(el("tr", {class: "outcome-" + step.outcome},
        el("td", {}, timeOf(step.time_unix_ms)), el("td", {}, step.kind), el("td", {class: "mono"}, step.name),
        el("td", {}, step.outcome)));
    }
    detail.appendChild(el("h3", {}, "Recent steps"));
    detail.appendChild(s.recent_steps.length ? el("table", {class: "steps"},
      el("thead", {}, el("tr", {}, el("th", {}, "Time"), el("th", {}, "Kind"), el("th", {}, "Name"),
                                   el("th", {}, "Outcome"))), steps) : el("p", {class: "empty"}, "No steps kept."));

    const history = el("ol", {class: "history"});
    for (const h of s.verdict_history) {
      history.appendChild(el("li", {}, el("span", {class: "muted"}, timeOf(h.time_unix_ms)), " ",
                                    verdictChip(h.verdict), " ", h.reason || ""));
    }
    detail.appendChild(el("h3", {}, "Verdict history"));
    detail.appendChild(s.verdict_history.length ? history : el("p", {class: "empty"}, "Always continue."));
  }

  // -- live ---------------------------------------------------------------------------------------

  function setLive(on, text) {
    const node = $("live");
    node.className = "live " + (on ? "on" : "off");
    node.textContent = text;
  }

  function stopStream() {
    if (state.stream) state.stream.abort();
    state.stream = null;
  }

  async function stream() {
    stopStream();
    const controller = new AbortController();
    state.stream = controller;
    try {
      const response = await fetch("/v1/events", {headers: headers(), signal: controller.signal, cache: "no-store"});
      if (response.status === 401 || response.status === 403) {
        if (state.config.auth === "token") { askToken("The token was refused."); return; }
        throw new Error("refused");
      }
      if (!response.ok || !response.body) throw new Error("status " + response.status);
      setLive(true, "live");
      state.dirty = true;  // anything missed while disconnected
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, {stream: true});
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          handle(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (e) {
      if (controller.signal.aborted) return;
    }
    if (state.stream !== controller) return;
    setLive(false, "reconnecting…");
    setTimeout(() => { if (state.stream === controller) stream(); }, 2000);
  }

  function handle(block) {
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).trim());
    }
    if (!data.length) return;
    if (event === "finding" || event === "verdict" || event === "lagged") state.dirty = true;
  }

  // -- start --------------------------------------------------------------------------------------

  function start() {
    $("main").hidden = false;
    load();
    stream();
  }

  setInterval(() => {
    const now = Date.now();
    if ($("main").hidden) return;
    if ((state.dirty && now - state.lastLoad >= REFRESH_MIN_MS) || now - state.lastLoad >= FULL_REFRESH_MS) load();
  }, 250);

  let searchTimer = null;
  $("search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { state.query = $("search").value.trim(); load(); }, 250);
  });

  (async function init() {
    try {
      const response = await fetch("/console/config.json", {cache: "no-store"});
      if (!response.ok) throw new Error("status " + response.status);
      state.config = await response.json();
    } catch (e) {
      showError("Cannot reach otelloop: " + e.message);
      return;
    }
    if (state.config.auth === "token") {
      state.token = sessionStorage.getItem(TOKEN_KEY);
      if (!state.token) { askToken(""); return; }
    }
    start();
  })();
})();
