// The keys page: issue, list, rotate and revoke virtual keys through
// /admin/keys (docs/keys-and-teams.md). A secret is shown once, when issued or
// rotated; the list shows each key's limits and its spend per period
// (today, this month, its lifetime), against the key's cap for each.
"use strict";

const usd = (v) => "$" + Number(v).toFixed(6);

function limitsText(b) {
  const parts = [];
  if (b.requests_per_minute) parts.push(b.requests_per_minute + " req/min");
  if (b.tokens_per_minute) parts.push(b.tokens_per_minute + " tok/min");
  if (b.cost_usd_per_day) parts.push("$" + b.cost_usd_per_day + "/day");
  if (b.cost_usd_per_month) parts.push("$" + b.cost_usd_per_month + "/month");
  if (b.cost_usd_total) parts.push("$" + b.cost_usd_total + " in total");
  if (b.max_concurrent) parts.push(b.max_concurrent + " concurrent");
  return parts.join(" · ") || "the tenant's";
}

// spendCell shows a key's spend today, this month and over its life,
// each with a meter against the key's cap for that period when it has one.
function spendCell(k) {
  const td = el("td", { class: "spend" });
  const periods = [["day", "today_usd", "cost_usd_per_day", "the day"], ["month", "month_usd", "cost_usd_per_month", "the month"],
    ["total", "total_usd", "cost_usd_total", "the lifetime"]];
  for (const [name, field, capField, what] of periods) {
    const spent = k.spend ? k.spend[field] : 0, cap = k.budget[capField];
    const line = el("div", { class: "period", "data-period": name }, name + " " + usd(spent) + (cap ? " of $" + cap : ""));
    if (cap) line.append(" ", el("meter", { min: 0, max: cap, value: Math.min(spent, cap), title: Math.round(100 * spent / cap) + " % of " + what }));
    td.append(line);
  }
  return td;
}

function showSecret(k) {
  $("#secret").hidden = false;
  $("#secretvalue").textContent = k.key;
  $("#secretfor").textContent = "(" + (k.name || k.id) + ", tenant " + k.tenant + ")";
}

async function loadKeys() {
  try {
    const list = await admin("GET", "/admin/keys");
    const rows = list.data.map((k) => {
      const status = k.revoked_at ? "revoked" : (k.expires_at && Date.parse(k.expires_at) <= Date.now() ? "expired" : "live");
      const actions = el("td", {});
      if (status === "live") {
        const rotate = el("button", { class: "rotate" }, "Rotate"), revoke = el("button", { class: "revoke" }, "Revoke");
        rotate.addEventListener("click", async () => {
          try { showSecret(await admin("POST", "/admin/keys/" + k.id + "/rotate", {})); await loadKeys(); } catch (e) { showError(e); }
        });
        revoke.addEventListener("click", async () => {
          try { await admin("DELETE", "/admin/keys/" + k.id); await loadKeys(); } catch (e) { showError(e); }
        });
        actions.append(rotate, " ", revoke);
      }
      return el("tr", { "data-id": k.id }, el("td", { title: k.id }, k.name || k.id), el("td", {}, k.tenant),
        el("td", {}, el("code", {}, k.prefix + "…")), el("td", {}, k.models.length ? k.models.join(", ") : "all"),
        el("td", { class: "limits" }, limitsText(k.budget)), spendCell(k), el("td", { class: "status s-" + status }, status), actions);
    });
    $("#keytable tbody").replaceChildren(...rows);
    // How many times the list was drawn: a button of an earlier drawing
    // is gone, so a script that clicks waits for the next (tests do).
    $("#keytable").dataset.rendered = String(Number($("#keytable").dataset.rendered || 0) + 1);
    showError();
  } catch (e) { showError(e); }
}

$("#issueform").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = new FormData($("#issueform"));
  const body = { tenant: f.get("tenant"), name: f.get("name"), budget: {} };
  const models = String(f.get("models")).split(",").map((s) => s.trim()).filter(Boolean);
  if (models.length) body.models = models;
  for (const n of ["requests_per_minute", "tokens_per_minute", "max_concurrent"]) if (f.get(n)) body.budget[n] = parseInt(f.get(n), 10);
  for (const n of ["cost_usd_per_day", "cost_usd_per_month", "cost_usd_total"]) if (f.get(n)) body.budget[n] = parseFloat(f.get(n));
  if (f.get("expires_at")) body.expires_at = f.get("expires_at");
  try {
    showSecret(await admin("POST", "/admin/keys", body));
    await loadKeys();
  } catch (e) { showError(e); }
});

onKey(loadKeys);
