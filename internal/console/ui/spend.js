// The spend page: the report of /admin/spend (docs/spend.md) grouped and
// filtered as the form says — a row per group, the total that counts each
// request once, the report's note where rows overlap, "more" for the next
// page — and a chart of cost per UTC day, stacked by model, under the same
// filters. Every figure is the receipts' own.
"use strict";

const palette = ["#0969da", "#2da44e", "#d4a72c", "#cf222e", "#8250df", "#1b7c83", "#bf3989", "#6e7781"];

// filterQuery is the form's range and filters (not the grouping or the
// page size); "to" is a day included, so the report's exclusive end is
// the next day.
function filterQuery() {
  const q = new URLSearchParams();
  for (const [k, v] of new FormData($("#range"))) if (v && k !== "group_by" && k !== "limit") q.set(k, v);
  if (q.get("to")) {
    const d = new Date(q.get("to") + "T00:00:00Z");
    d.setUTCDate(d.getUTCDate() + 1);
    q.set("to", d.toISOString().slice(0, 10));
  }
  return q;
}

// chart draws one bar per day, stacked by model.
function chart(days, models, cost) {
  const W = 900, H = 260, left = 60, bottom = 40, top = 10;
  const max = Math.max(1e-9, ...days.map((d) => models.reduce((s, m) => s + (cost[m][d] || 0), 0)));
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "spend per day and model" });
  const bw = Math.max(4, Math.min(60, (W - left - 10) / Math.max(1, days.length) - 8));
  svg.append(el("text", { x: 4, y: top + 10 }, "$" + max.toFixed(6)), el("text", { x: 4, y: H - bottom }, "$0"));
  days.forEach((d, i) => {
    const x = left + i * (bw + 8);
    let y = H - bottom;
    models.forEach((m, j) => {
      const v = cost[m][d] || 0;
      if (!v) return;
      const h = (v / max) * (H - bottom - top);
      y -= h;
      svg.append(el("rect", { class: "bar", "data-day": d, "data-model": m, x, y, width: bw, height: Math.max(1, h), fill: palette[j % palette.length] },
        el("title", {}, `${d} · ${m}: $${v.toFixed(6)}`)));
    });
    svg.append(el("text", { x, y: H - bottom + 14 }, d.slice(5)));
  });
  models.forEach((m, j) => {
    const x = left + j * 140;
    svg.append(el("rect", { x, y: H - 16, width: 10, height: 10, fill: palette[j % palette.length] }), el("text", { x: x + 14, y: H - 7 }, m));
  });
  return svg;
}

async function loadChart() {
  const q = filterQuery();
  q.set("group_by", "model");
  const byModel = (await admin("GET", "/admin/spend?" + q)).data;
  const models = byModel.map((r) => r.group), cost = {}, days = new Set();
  await Promise.all(models.map(async (m) => {
    const dq = new URLSearchParams(q);
    dq.set("group_by", "day");
    dq.set("model", m);
    cost[m] = {};
    for (const r of (await admin("GET", "/admin/spend?" + dq)).data) {
      cost[m][r.group] = r.cost_usd;
      days.add(r.group);
    }
  }));
  $("#chart").replaceChildren(chart([...days].sort(), models, cost));
}

// reportRow is one row of the table: a group's (data-group holds it as
// the report names it; "" is the requests without a value), or the total.
function reportRow(by, r, isTotal) {
  const none = !isTotal && r.group === "";
  const tr = el("tr", isTotal ? { class: "total" } : { "data-group": r.group },
    el(isTotal ? "th" : "td", { class: "group name" + (none ? " none" : ""), title: isTotal ? "each request counted once" : none ? "requests without a " + by : r.group },
      isTotal ? "total" : none ? "(none)" : r.group));
  if (by === "key") tr.append(el("td", { class: "keyname name", title: r.name || "" }, isTotal ? "" : r.name || ""));
  tr.append(el("td", { class: "requests num" }, r.requests), el("td", { class: "attempts num" }, r.attempts),
    el("td", { class: "input num" }, r.input_tokens), el("td", { class: "output num" }, r.output_tokens),
    el("td", { class: "cost num" }, r.cost_usd.toFixed(6)), el("td", { class: "orphans num" }, r.orphans_cost_usd.toFixed(6)));
  return tr;
}

// shown is the query of the report on the page and where its next page
// starts.
let shown = null;

// loadReport shows the report's first page, or with more the next one
// under the rows already shown. The table's data-rendered counts drawings.
async function loadReport(more) {
  let q;
  if (more) {
    q = new URLSearchParams(shown.query);
    q.set("after", shown.next);
  } else {
    const form = new FormData($("#range"));
    q = filterQuery();
    q.set("group_by", form.get("group_by"));
    if (form.get("limit")) q.set("limit", form.get("limit"));
  }
  const rep = await admin("GET", "/admin/spend?" + q);
  const by = rep.group_by, rows = rep.data.map((r) => reportRow(by, r, false));
  if (more) $("#report tbody").append(...rows);
  else $("#report tbody").replaceChildren(...rows);
  $("#report tfoot").replaceChildren(reportRow(by, rep.total, true));
  $("#report th.keyname").hidden = by !== "key";
  $("#groupname").textContent = $(`#range select option[value="${by}"]`).textContent;
  $("#note").hidden = !rep.note;
  $("#note").textContent = rep.note ? "Note: " + rep.note + "." : "";
  $("#more").hidden = !rep.has_more;
  if (!more) {
    shown = { query: q.toString() };
    $("#apiquery").textContent = "GET /admin/spend?" + q;
  }
  shown.next = rep.next_after;
  const table = $("#report");
  table.dataset.rendered = String(Number(table.dataset.rendered || 0) + 1);
}

async function loadSpend() {
  try {
    await Promise.all([loadReport(false), loadChart()]);
    showError();
  } catch (e) { showError(e); }
}

$("#range").addEventListener("submit", (ev) => { ev.preventDefault(); loadSpend(); });
$("#more").addEventListener("click", () => loadReport(true).then(() => showError(), showError));
onKey(loadSpend);
