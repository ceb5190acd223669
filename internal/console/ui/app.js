// oncegate console: reads /v1/console/ with the key the user gives (kept
// in this tab's sessionStorage only). A fragment #key=…&request=…&verify=1
// opens a request directly (and is removed from the address bar).
"use strict";

const $ = (sel) => document.querySelector(sel);
const params = new URLSearchParams(location.hash.slice(1));
let key = params.get("key") || sessionStorage.getItem("oncegate-key") || "";
if (params.get("key")) {
  sessionStorage.setItem("oncegate-key", key);
  history.replaceState(null, "", location.pathname);
}

function el(tag, attrs, ...children) {
  const ns = ["svg", "rect", "line", "text", "g", "title"].includes(tag) ? "http://www.w3.org/2000/svg" : null;
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

async function api(path) {
  const res = await fetch(path, { headers: { Authorization: "Bearer " + key } });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const e = new Error((body.error && body.error.message) || res.status + " " + res.statusText);
    e.status = res.status;
    throw e;
  }
  return body;
}

function showError(e) { $("#error").textContent = e ? String(e.message || e) : ""; }

// showKeyPrompt puts the prompt for a key (and why the last one was not
// taken) in place of the dashboard, which has nothing to show without one.
function showKeyPrompt(why) {
  $("#nokey").hidden = false;
  $("#keyproblem").textContent = why || "";
  for (const sel of ["#live", "#list", "#detail"]) $(sel).hidden = true;
  showError();
  $("#key").focus();
}

function showDashboard() {
  $("#nokey").hidden = true;
  $("#live").hidden = false;
  $("#list").hidden = false;
}

// failed shows what went wrong: a refused key brings the prompt back.
function failed(e) {
  if (e.status !== 401) {
    showError(e);
    return;
  }
  key = ""; // nothing more is asked with it
  sessionStorage.removeItem("oncegate-key");
  showKeyPrompt("That key was not accepted: " + e.message + ".");
}

// when is a time as a local date and time, e.g. 2026-03-14 09:26:53.
function when(iso) {
  const d = new Date(iso), p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// budgetText says how much of the fleet retry budget is used and left.
function budgetText(l) {
  if (l.tenant) return "fleet-wide: the admin key sees it";
  if (!l.retry_budget) return "shared (Redis)";
  const used = Math.round(l.retry_budget.retries), allowed = Math.floor(l.retry_budget.allowed);
  return `${used} used of ${allowed} · ${Math.max(0, allowed - used)} left`;
}

async function loadLive() {
  if (!key) return;
  try {
    const l = await api("/v1/console/live");
    const stats = $("#livestats");
    stats.replaceChildren();
    const add = (k, v) => stats.append(el("dt", {}, k), el("dd", {}, v));
    if (l.tenant) add("tenant", l.tenant);
    add("logical requests", l.logical_requests);
    add("attempts per request", l.attempts_per_logical_request.toFixed(3));
    for (const [k, v] of Object.entries(l.dedup || {}).sort()) add("dedup " + k, v);
    add("turn ratio", l.user_turns ? l.turn_ratio.toFixed(3) : "–");
    add("retry budget", budgetText(l));
    const load = Object.fromEntries((l.routes || []).map((r) => [r.route, r]));
    const rows = l.breakers.map((b) => {
      const r = load[b.route];
      return el("tr", {}, el("td", { class: "name route", title: b.route }, b.route), el("td", { class: "s-" + b.state }, b.state),
        el("td", { class: "num" }, b.generation), el("td", { class: "num" }, r ? (100 * r.share).toFixed(1) + "%" : "–"),
        el("td", { class: "num" }, r ? r.in_flight : "–"), el("td", { class: "num" }, r && r.ttft_ms ? r.ttft_ms + " ms" : "–"),
        el("td", { class: "num" }, r ? (100 * r.headroom).toFixed(0) + "%" : "–"));
    });
    $("#breakers tbody").replaceChildren(...rows);
    showError();
  } catch (e) { failed(e); }
}

async function loadRequests() {
  if (!key) return;
  const q = new URLSearchParams();
  for (const [k, v] of new FormData($("#filters"))) if (v) q.set(k, v);
  try {
    const list = await api("/v1/console/requests?" + q);
    const rows = list.data.map((r) => {
      const terminal = r.terminal + (r.reason && r.reason !== r.terminal ? " (" + r.reason + ")" : "");
      const tr = el("tr", { "data-id": r.request_id },
        el("td", {}, el("code", { title: r.request_id }, r.request_id.slice(0, 13) + "…")),
        el("td", { class: "created", title: r.created_at }, when(r.created_at)),
        el("td", { class: "name", title: r.tenant }, r.tenant), el("td", { class: "name", title: r.model }, r.model),
        el("td", { class: "route", title: r.route || "" }, r.route || "–"), el("td", { class: "num" }, r.attempts),
        el("td", { class: "terminal t-" + r.terminal, title: terminal }, terminal),
        el("td", { class: "num" }, r.billable_tokens), el("td", { class: "cost num" }, r.cost_usd.toFixed(6)));
      tr.addEventListener("click", () => showRequest(r.request_id));
      return tr;
    });
    $("#requests tbody").replaceChildren(...rows);
    showError();
  } catch (e) { failed(e); }
}

const classOf = { success: "ok", retryable: "retryable", non_retryable: "non-retryable", "non-retryable": "non-retryable", indeterminate: "indeterminate" };

// timeline draws a receipt's attempts on one time axis: a bar per attempt
// coloured by outcome, the backoff gap before it, the visible-output
// boundary as a dashed line.
function timeline(r) {
  const t0 = Date.parse(r.created_at);
  const times = r.attempts.flatMap((a) => [Date.parse(a.started_at), Date.parse(a.observed_at)]);
  const t1 = Math.max(t0 + 1, ...times);
  const W = 1000, left = 10, axis = 560, rowH = 26, top = 20;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (axis - left);
  const H = top + rowH * Math.max(1, r.attempts.length) + 20;
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "attempt timeline" });
  svg.append(el("text", { x: left, y: 12 }, "0 ms"), el("text", { x: axis - 50, y: 12 }, (t1 - t0) + " ms"));
  let prevEnd = t0;
  let boundary = null;
  r.attempts.forEach((a, i) => {
    const y = top + i * rowH;
    const s = Date.parse(a.started_at), e = Date.parse(a.observed_at);
    if (s > prevEnd) svg.append(el("rect", { class: "gap", x: x(prevEnd), y: y + 4, width: Math.max(1, x(s) - x(prevEnd)), height: rowH - 10 },
      el("title", {}, "wait " + (s - prevEnd) + " ms" + (a.jitter_ms ? " (jitter " + a.jitter_ms + " ms)" : ""))));
    const bar = el("rect", { class: "attempt " + (classOf[a.outcome_class] || "retryable"), "data-ordinal": a.ordinal,
      x: x(s), y: y + 2, width: Math.max(2, x(e) - x(s)), height: rowH - 6 },
      el("title", {}, `#${a.ordinal} ${a.route} (${a.purpose}) ${a.kind} ${a.http_status || ""} — ${a.usage.input_tokens} input and ` +
        `${a.usage.output_tokens} output tokens billed, ${a.emitted_tokens} emitted to the client, $${a.cost_usd}`));
    svg.append(bar, el("text", { class: "label", x: axis + 12, y: y + rowH / 2 + 3 },
      `#${a.ordinal} ${a.route} ${a.kind} · in ${a.usage.input_tokens} · out ${a.usage.output_tokens} · $${a.cost_usd.toFixed(6)}`));
    if (boundary === null && a.visible_output) boundary = Date.parse(a.first_byte_at || a.started_at);
    prevEnd = e;
  });
  if (boundary !== null) svg.append(el("line", { class: "boundary", x1: x(boundary), x2: x(boundary), y1: 14, y2: top + rowH * r.attempts.length },
    el("title", {}, "visible output")));
  return svg;
}

async function showRequest(id, verifyNow) {
  try {
    const r = await api("/v1/console/requests/" + encodeURIComponent(id));
    $("#detail").hidden = false;
    $("#detailid").textContent = r.request_id;
    $("#timeline").replaceChildren(timeline(r));
    $("#receipt").textContent = JSON.stringify(r, null, 2);
    $("#verdict").textContent = "";
    $("#verdict").className = "";
    $("#verify").onclick = () => verify(id);
    $("#detail").scrollIntoView({ block: "start" }); // below a long list otherwise
    if (verifyNow) await verify(id);
    showError();
  } catch (e) { failed(e); }
}

async function verify(id) {
  const v = await api("/v1/console/requests/" + encodeURIComponent(id) + "/verify");
  const verdict = $("#verdict");
  verdict.className = v.ok ? "ok" : "drift";
  verdict.textContent = v.ok ? "verified: no drift" : v.drifts.length + " drift(s): " + v.drifts.map((d) => d.message).join("; ");
}

$("#keyform").addEventListener("submit", (ev) => {
  ev.preventDefault();
  key = $("#key").value.trim();
  sessionStorage.setItem("oncegate-key", key);
  if (!key) {
    showKeyPrompt("");
    return;
  }
  showDashboard();
  loadLive();
  loadRequests();
});
$("#filters").addEventListener("submit", (ev) => { ev.preventDefault(); loadRequests(); });

(async () => {
  if (key) {
    showDashboard();
    await Promise.all([loadLive(), loadRequests()]);
    if (params.get("request")) await showRequest(params.get("request"), params.get("verify") === "1");
  } else {
    showKeyPrompt("");
  }
  document.body.setAttribute("data-ready", "1");
  setInterval(loadLive, 2000);
})();
