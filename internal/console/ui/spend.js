// The spend page: a chart of cost per UTC day, a bar stacked by model,
// and the totals per model, from /admin/spend (docs/keys-and-teams.md) — the
// receipts' own figures.
"use strict";

const palette = ["#0969da", "#2da44e", "#d4a72c", "#cf222e", "#8250df", "#1b7c83", "#bf3989", "#6e7781"];

function rangeQuery() {
  const q = new URLSearchParams();
  for (const [k, v] of new FormData($("#range"))) if (v) q.set(k, v);
  if (q.get("to")) { // a date's end: the next day, exclusive
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

async function loadSpend() {
  try {
    const q = rangeQuery();
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
    $("#bymodel tbody").replaceChildren(...byModel.map((r) => el("tr", { "data-model": r.group }, el("td", {}, r.group), el("td", {}, r.requests),
      el("td", {}, r.attempts), el("td", {}, r.input_tokens), el("td", {}, r.output_tokens), el("td", { class: "cost" }, r.cost_usd.toFixed(6)))));
    showError();
  } catch (e) { showError(e); }
}

$("#range").addEventListener("submit", (ev) => { ev.preventDefault(); loadSpend(); });
onKey(loadSpend);
