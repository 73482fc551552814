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
    sessions: [], sort: null, service: "", agent: "", within: 0,
  };

  // What a person sees on hover: what each number and detector means (docs/detectors.md says more).
  const EXPLAIN = {
    verdict: "What the agent is told when it asks: continue, nudge (change approach), stop (held until " +
             "resumed) or paused (by an operator). Ended: no span for a while.",
    loop_score: "trajectory detector's loop score, 0 to 5: repeated calls and steps without progress add to " +
                "it, each quiet step halves it. 2 = nudge, 3 = stop.",
    entropy: "Variety of the last 5 tool steps, 0 to 1 (distinct / present): below 0.5 warning, below " +
             "0.25 loop.",
    steps: "Steps seen in this session (tool calls, model calls, agent turns).",
    tokens: "Input / output tokens the session's model calls reported.",
    cost: "Cost the spans reported, or computed from tokens with the pricing setting.",
    started: "Start of the session's first step.",
    last: "End of the session's latest step, and how long ago otelloop last saw a span of it.",
    unjudged: "Tool steps whose spans carried no result and no error message: neither progress nor " +
              "evidence of a loop. Turn content capture on in the agent's instrumentation.",
    held: "Steps since the stop that brought nothing new: no detector judged them (the stop stands until " +
          "resumed), so they raised no finding; the loop score is as it stood, the entropy counts them.",
  };
  const DETECTORS = {
    divergence: "divergence: the same step back to back (advisory).",
    rate: "rate: money or tokens spent too fast per second of session time (advisory).",
    drift: "drift: a coding agent re-reading a file, reverting an edit, or hitting the same failure again.",
    entropy: "entropy: too little variety in the last tool steps.",
    stall: "stall: agent or graph-node turns going round a cycle without progress.",
    trajectory: "trajectory: repeated tool calls and results; its loop score rises to nudge (2) then stop (3).",
  };
  const INTERVENTION = {
    nudge: "trajectory nudge: the loop score reached 2; the agent is told to change approach.",
    stop: "trajectory stop: the loop score reached 3; the agent is told to stop (held until resumed).",
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

  function dateOf(ms) {
    if (!ms) return "–";
    const d = new Date(ms);
    const pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${d.toLocaleTimeString([], {hour12: false})}`;
  }

  function span(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 60) return `${seconds} s`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${Math.floor(seconds % 3600 / 60)} min`;
    return `${Math.floor(seconds / 86400)} d ${Math.floor(seconds % 86400 / 3600)} h`;
  }

  function ago(seconds) {
    return seconds === null || seconds === undefined ? "–" : span(seconds) + " ago";
  }

  function cost(s) {
    if (!s.cost_usd && (s.input_tokens || s.output_tokens) && !state.config.pricing) {
      return el("span", {class: "hint", title: "No cost on the spans and no pricing setting: add a pricing " +
                         "entry per model (docs/configuration.md) to compute cost from tokens."}, "unknown");
    }
    return "$" + num(s.cost_usd, 4);
  }

  function tokens(s) {
    return `${s.input_tokens || 0} / ${s.output_tokens || 0}`;
  }

  function num(value, digits) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
  }

  function verdictChip(verdict, s) {
    const chip = el("span", {class: "chip verdict-" + verdict, title: EXPLAIN.verdict}, verdict);
    if (!s || !s.ended) return chip;
    return el("span", {class: "verdicts"}, chip,
              el("span", {class: "chip ended", title: `No span for ${span(s.idle_seconds)} (ended after ` +
                          `${span(state.config.ended_after_seconds)}; held until state.idle_timeout).`}, "ended"));
  }

  function badges(s) {
    const out = el("span", {class: "badges"});
    if (s.loop) {
      const text = s.loop.budget ? `Loop ${s.loop.iteration}/${s.loop.budget}` : `Loop ${s.loop.iteration}`;
      out.appendChild(el("span", {class: "badge loop", title: "cycle " + s.loop.cycle_id}, text));
    }
    if (s.intervention && s.intervention !== "observe") {
      out.appendChild(el("span", {class: "badge intervention-" + s.intervention, title: INTERVENTION[s.intervention] || ""},
                         "trajectory " + s.intervention));
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

  const ENVIRONMENT_HELP = "deployment.environment.name of the spans' resource (or the older " +
    "deployment.environment)";

  const COLUMNS = [
    // [label, sort key or null, value for sorting, hover text]
    ["Verdict", "verdict", (s) => state.config.verdicts.indexOf(s.verdict) - (s.ended ? 0.5 : 0), EXPLAIN.verdict],
    ["Session", "session", (s) => s.session_id, "Session id (full id on hover)"],
    ["Agent", "agent", (s) => s.agent, ""],
    ["Service", "service", (s) => s.service, "service.name of the spans, and below it their " +
      "deployment.environment.name"],
    ["Loop score", "loop_score", (s) => s.loop_score ?? -1, EXPLAIN.loop_score],
    ["Entropy", "entropy", (s) => s.entropy_score ?? 2, EXPLAIN.entropy],
    ["Steps", "steps", (s) => s.steps, EXPLAIN.steps],
    ["Tokens in / out", "tokens", (s) => (s.input_tokens || 0) + (s.output_tokens || 0), EXPLAIN.tokens],
    ["Cost", "cost", (s) => s.cost_usd, EXPLAIN.cost],
    ["Started", "started", (s) => s.first_seen_unix_nano, EXPLAIN.started],
    ["Last activity", "last", (s) => -s.idle_seconds, EXPLAIN.last],
  ];

  function renderHead() {
    const row = document.querySelector("#sessions thead tr");
    clear(row);
    for (const [label, key, , help] of COLUMNS) {
      const sorted = state.sort && state.sort.key === key;
      const th = el("th", {"aria-sort": sorted ? (state.sort.dir > 0 ? "ascending" : "descending") : "none",
                           title: help || null},
        el("button", {type: "button", class: "sort", "data-sort": key, onclick: () => sortBy(key)},
           label, sorted ? (state.sort.dir > 0 ? " ▲" : " ▼") : ""));
      row.appendChild(th);
    }
  }

  function sortBy(key) {
    const dir = state.sort && state.sort.key === key ? -state.sort.dir : (key === "session" || key === "agent" ||
      key === "service" ? 1 : -1);
    state.sort = {key, dir};
    renderSessions();
  }

  function filtered() {
    let list = state.sessions.filter((s) => (!state.service || s.service === state.service) &&
      (!state.agent || s.agent === state.agent) && (!state.within || s.idle_seconds <= state.within));
    if (state.sort) {
      const column = COLUMNS.find((c) => c[1] === state.sort.key);
      const value = column[2];
      const dir = state.sort.dir;
      list = list.slice().sort((a, b) => {
        const x = value(a), y = value(b);
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
    }
    return list;
  }

  function renderFilters() {
    for (const [id, field] of [["filter-service", "service"], ["filter-agent", "agent"]]) {
      const select = $(id);
      const values = [...new Set(state.sessions.map((s) => s[field]).filter(Boolean))].sort();
      if (state[field] && !values.includes(state[field])) values.unshift(state[field]);
      clear(select);
      select.appendChild(el("option", {value: ""}, "all"));
      for (const v of values) select.appendChild(el("option", {value: v}, v));
      select.value = state[field];
    }
  }

  function renderSessions(body) {
    if (body) {
      state.sessions = body.sessions;
      $("total").textContent = body.total > body.sessions.length ? `(${body.sessions.length} of ${body.total})`
        : `(${body.total})`;
      renderFilters();
    }
    renderHead();
    const tbody = document.querySelector("#sessions tbody");
    clear(tbody);
    const list = filtered();
    $("sessions-empty").hidden = list.length > 0;
    for (const s of list) {
      const row = el("tr", {"data-session": s.session_id, class: s.session_id === state.selected ? "selected" : "",
                            tabindex: 0, onclick: () => select(s.session_id)},
        el("td", {}, verdictChip(s.verdict, s), badges(s)),
        el("td", {class: "mono", title: s.session_id}, short(s.session_id)),
        el("td", {class: "name", title: s.agent}, s.agent || "–"),
        el("td", {class: "name service", title: s.service}, s.service || "–", s.environment
          ? el("span", {class: "environment", title: `${ENVIRONMENT_HELP}: ${s.environment}`}, s.environment) : null),
        el("td", {class: "num", title: EXPLAIN.loop_score}, num(s.loop_score, 2)),
        el("td", {class: "num", title: EXPLAIN.entropy}, num(s.entropy_score, 2),
           s.entropy_severity ? el("span", {class: "chip entropy-" + s.entropy_severity}, s.entropy_severity) : null),
        el("td", {class: "num"}, String(s.steps)),
        el("td", {class: "num tokens"}, tokens(s)),
        el("td", {class: "num cost"}, cost(s)),
        el("td", {class: "when", title: dateOf(s.first_seen_unix_nano / 1e6)}, timeOf(s.first_seen_unix_nano / 1e6)),
        el("td", {class: "when ago", title: dateOf(s.last_seen_unix_nano / 1e6)}, ago(s.idle_seconds)));
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
           verdictChip(a.verdict, a), badges(a),
           el("span", {class: "mono", title: a.session_id}, short(a.session_id)),
           el("span", {class: "agent"}, a.agent || "–"),
           el("span", {class: "muted", title: dateOf(a.alert_time_unix_ms)}, timeOf(a.alert_time_unix_ms))),
        el("div", {class: "alert-finding"},
           el("span", {class: "chip severity-" + (f.severity || "warn")}, f.severity || ""),
           el("span", {class: "event", title: DETECTORS[f.detector] || ""}, f.event || ""), " ",
           el("span", {class: "message"}, f.message || "")),
        el("div", {class: "alert-foot"},
           el("span", {class: "muted alert-count"}, a.alerts === 1 ? "1 alert" : `${a.alerts} alerts`),
           el("button", {type: "button", onclick: () => select(a.session_id)}, "Inspect"),
           el("button", {type: "button", class: "ack", title: "Take this session off the alerts until it alerts again",
                         onclick: () => act(a.session_id, "acknowledge")}, "Acknowledge"),
           pauseButton(a, "Pause and Inspect"))));
    }
  }

  // Pause is offered only where it means something: not on a session that has ended or is already stopped.
  function pauseButton(s, label) {
    if (s.verdict === "paused") {
      return el("button", {type: "button", class: "resume", onclick: () => act(s.session_id, "resume")}, "Resume");
    }
    if (s.verdict === "stop") {
      return el("button", {type: "button", class: "resume", title: "Lift the stop: the agent may continue; the " +
                           "detectors stop it again if it still loops", onclick: () => act(s.session_id, "resume")},
                "Resume");
    }
    if (s.ended) return null;
    return el("button", {type: "button", class: "pause",
                         onclick: () => act(s.session_id, "pause").then(() => select(s.session_id))},
              label || "Pause");
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

  function closeDetail() {
    state.selected = null;
    $("detail").hidden = true;
    document.body.classList.remove("with-detail");
    for (const row of document.querySelectorAll("#sessions tbody tr.selected")) row.classList.remove("selected");
  }

  function renderGone(sessionId) {
    const detail = $("detail");
    clear(detail);
    detail.hidden = false;
    document.body.classList.add("with-detail");
    detail.appendChild(el("div", {class: "detail-head"}, el("h2", {id: "detail-title"}, "Session " + short(sessionId)),
      el("button", {type: "button", class: "close", onclick: closeDetail}, "Close")));
    detail.appendChild(el("p", {class: "empty"}, "This session is no longer held (idle or evicted)."));
  }

  function traceLink(s) {
    const template = state.config.trace_url;
    if (!template || !/^https?:\/\//.test(template)) {
      return el("span", {class: "hint trace-hint", title: "Set console.trace_url, e.g. " +
                         "http://jaeger:16686/trace/{trace_id} (docs/console.md)"}, "no trace link: set console.trace_url");
    }
    if (template.includes("{trace_id}") && !s.trace_id) return null;
    const url = template.split("{trace_id}").join(encodeURIComponent(s.trace_id || ""))
      .split("{session_id}").join(encodeURIComponent(s.session_id));
    return el("a", {href: url, target: "_blank", rel: "noopener noreferrer", class: "trace-link"}, "Open trace ↗");
  }

  function copyButton(text) {
    const button = el("button", {type: "button", class: "copy", title: "Copy the full id"}, "Copy");
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = "Copied";
      } catch (e) {
        button.textContent = "Select and copy";
      }
    });
    return button;
  }

  function callBlock(call) {
    return el("div", {class: "call"},
      el("div", {}, el("span", {class: "muted"}, "Repeated call "), el("code", {class: "call-name"}, call.name),
         el("code", {class: "call-args"}, call.args ? "(" + call.args + ")" : "(no arguments recorded)")),
      el("div", {}, el("span", {class: "muted"}, "Result "),
         el("code", {class: "call-result"}, call.result || "(no result recorded)")));
  }

  function fact(label, value, help, cls) {
    return [el("dt", {title: help || null}, label), el("dd", {class: cls || null, title: help || null}, value)];
  }

  function stepOutcome(step) {
    if (step.kind !== "tool" && step.outcome === "empty") {
      return el("span", {class: "muted", title: "No output on the span: model and agent steps are not judged " +
                         "on their output"}, "–");
    }
    return step.outcome;
  }

  function renderDetail(s) {
    const detail = $("detail");
    clear(detail);
    detail.hidden = false;
    document.body.classList.add("with-detail");
    // Under group_by auto a session without a conversation id is named by its trace (32 hex digits).
    const byTrace = state.config.group_by === "trace"
      || (state.config.group_by === "auto" && /^[0-9a-f]{32}$/.test(s.session_id));
    const idLabel = byTrace ? "Trace id" : "Conversation id";
    const started = s.first_seen_unix_nano / 1e6, last = s.last_seen_unix_nano / 1e6;
    detail.appendChild(el("div", {class: "detail-head"},
      el("h2", {id: "detail-title"}, "Session ", el("span", {class: "mono", title: s.session_id}, short(s.session_id))),
      verdictChip(s.verdict, s), badges(s), pauseButton(s), traceLink(s),
      el("button", {type: "button", class: "close", onclick: closeDetail}, "Close")));
    detail.appendChild(el("dl", {class: "facts"},
      ...fact(idLabel, el("span", {class: "session-id"}, el("span", {class: "mono"}, s.session_id), " ",
                          copyButton(s.session_id)),
              byTrace ? `The trace's id: its spans carry no conversation id (state.group_by: ${state.config.group_by})`
                : `gen_ai.conversation.id or session.id of the spans (state.group_by: ${state.config.group_by})`),
      ...fact("Agent", s.agent || "–"),
      ...fact("Service", s.service || "–", "service.name"),
      ...fact("Environment", s.environment || "–", ENVIRONMENT_HELP, "environment"),
      ...fact("Started", dateOf(started), EXPLAIN.started, "started"),
      ...fact("Last activity", `${dateOf(last)} (${ago(s.idle_seconds)})`, EXPLAIN.last, "last-activity"),
      ...fact("Duration", span(started && last ? (last - started) / 1000 : null), "From the first step's start to " +
              "the latest step's end", "duration"),
      ...fact("Reason", s.reason || "–", null, "reason"),
      ...fact("Message to the agent", s.message || "–", "What the verdict endpoint tells the agent",
              "verdict-message"),
      ...fact("Loop score", num(s.loop_score, 2) + " / 5", EXPLAIN.loop_score),
      ...fact("Entropy", num(s.entropy_score, 2) + (s.entropy_severity ? " " + s.entropy_severity : ""),
              EXPLAIN.entropy),
      ...fact("Steps", String(s.steps), EXPLAIN.steps),
      ...fact("Unjudged tool steps", String(s.unjudged_steps || 0), EXPLAIN.unjudged, "unjudged"),
      ...fact("Held since the stop", String(s.held_steps || 0), EXPLAIN.held, "held"),
      ...fact("Tokens in / out", tokens(s), EXPLAIN.tokens, "tokens"),
      ...fact("Cost", cost(s), EXPLAIN.cost, "cost")));

    const findings = el("ol", {class: "findings"});
    for (const f of s.findings.slice().reverse()) {
      const evidence = el("dl", {class: "evidence"});
      for (const [key, value] of Object.entries(f.evidence || {})) {
        if (f.call && key === "repeated_result") continue;  // a hash: the call and its result are shown
        evidence.appendChild(el("dt", {}, key));
        evidence.appendChild(el("dd", {}, String(value)));
      }
      const actions = el("ul", {class: "actions"});
      for (const a of f.suggested_actions || []) actions.appendChild(el("li", {}, a));
      const vote = (s.votes || {})[f.detector];
      const current = vote && vote.reason && vote.reason !== f.message ? vote.reason : null;
      findings.appendChild(el("li", {class: "finding severity-" + f.severity},
        el("div", {},
           el("span", {class: "chip severity-" + f.severity}, f.severity), " ",
           el("strong", {class: "event", title: DETECTORS[f.detector] || ""}, f.event), " ",
           el("span", {class: "muted", title: DETECTORS[f.detector] || ""},
              `${f.detector} · reported ${f.count === 1 ? "once" : f.count + " times"} · last ${timeOf(f.time_unix_ms)}`)),
        el("p", {class: "message"}, f.message || ""),
        current ? el("p", {class: "current"}, el("span", {class: "muted"}, "Current reason: "), current) : null,
        f.call ? callBlock(f.call) : null,
        evidence.childNodes.length ? evidence : null,
        (f.suggested_actions || []).length ? el("div", {class: "suggested"}, "Suggested actions:", actions) : null));
    }
    detail.appendChild(el("h3", {}, "Findings"));
    detail.appendChild(s.findings.length ? findings : el("p", {class: "empty"}, "No findings."));

    const steps = el("tbody");
    for (const step of s.recent_steps.slice().reverse()) {
      steps.appendChild(el("tr", {class: "outcome-" + step.outcome},
        el("td", {title: dateOf(step.time_unix_ms)}, timeOf(step.time_unix_ms)), el("td", {}, step.kind),
        el("td", {class: "mono"}, step.name),
        el("td", {class: "mono excerpt args"}, step.args || ""),
        el("td", {class: "mono excerpt result"}, step.result || ""),
        el("td", {class: "outcome"}, stepOutcome(step))));
    }
    detail.appendChild(el("h3", {}, "Recent steps ", el("span", {class: "muted"},
      `(latest ${s.recent_steps.length}, newest first; texts redacted and cut)`)));
    detail.appendChild(s.recent_steps.length ? el("table", {class: "steps"},
      el("thead", {}, el("tr", {}, el("th", {}, "Time"), el("th", {}, "Kind"), el("th", {}, "Name"),
                                   el("th", {}, "Arguments"), el("th", {}, "Result"), el("th", {}, "Outcome"))),
      steps) : el("p", {class: "empty"}, "No steps kept."));

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

  function renderDashboard() {
    const node = $("dashboard");
    clear(node);
    const url = state.config.dashboard_url;
    if (url && /^https?:\/\//.test(url)) {
      node.appendChild(el("a", {href: url, target: "_blank", rel: "noopener noreferrer"}, "Dashboard ↗"));
    } else {
      node.appendChild(el("span", {class: "hint", title: "Set console.dashboard_url to link your metrics dashboard " +
                                   "(the Helm chart ships a Grafana one)"}, "no dashboard link"));
    }
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

  for (const [id, field] of [["filter-service", "service"], ["filter-agent", "agent"]]) {
    $(id).addEventListener("change", () => { state[field] = $(id).value; renderSessions(); });
  }
  $("filter-within").addEventListener("change", () => { state.within = Number($("filter-within").value); renderSessions(); });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && state.selected) closeDetail(); });

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
    renderDashboard();
    if (state.config.auth === "token") {
      state.token = sessionStorage.getItem(TOKEN_KEY);
      if (!state.token) { askToken(""); return; }
    }
    start();
  })();
})();
