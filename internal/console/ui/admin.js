// Shared by the keys and spend pages: the admin key (kept in this tab's
// sessionStorage only, as the console keeps its key) and the admin API.
"use strict";

const $ = (sel) => document.querySelector(sel);
let key = sessionStorage.getItem("oncegate-key") || "";

function el(tag, attrs, ...children) {
  const ns = ["svg", "rect", "line", "text", "g", "title"].includes(tag) ? "http://www.w3.org/2000/svg" : null;
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

async function admin(method, path, body) {
  const res = await fetch(path, { method, headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body) });
  const out = res.status === 204 ? {} : await res.json().catch(() => ({}));
  if (!res.ok) {
    const e = new Error((out.error && out.error.message) || res.status + " " + res.statusText);
    e.status = res.status;
    throw e;
  }
  return out;
}

function showError(e) { $("#error").textContent = e ? String(e.message || e) : ""; }

// onKey runs load now (with a key) and whenever a key is entered.
function onKey(load) {
  $("#key").value = key;
  $("#keyform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    key = $("#key").value.trim();
    sessionStorage.setItem("oncegate-key", key);
    load();
  });
  (async () => {
    if (key) await load();
    document.body.setAttribute("data-ready", "1");
  })();
}
