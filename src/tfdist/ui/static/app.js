// tfdist dashboard: the little script a live page needs. Server-rendered fragments replace
// the page's live part when the store changes (server-sent events); log lines are always
// set as text (textContent), never as markup.
"use strict";

function liveSection() {
  const el = document.getElementById("live");
  if (!el || !el.dataset.events || !window.EventSource) return;
  let pending = false;
  const source = new EventSource(el.dataset.events);
  source.addEventListener("change", () => {
    if (pending) return;
    pending = true;
    setTimeout(async () => {
      pending = false;
      try {
        const res = await fetch(el.dataset.fragment, { credentials: "same-origin" });
        if (!res.ok) return;
        // the runs ticked for comparing stay ticked when the list is redrawn
        const ticked = new Set([...el.querySelectorAll("input[name=jobs]:checked")].map((i) => i.value));
        el.innerHTML = await res.text();  // our own autoescaped template
        for (const box of el.querySelectorAll("input[name=jobs]")) box.checked = ticked.has(box.value);
      } catch (e) { /* next change retries */ }
    }, 150);
  });
}

function logViewer() {
  const box = document.getElementById("log");
  if (!box) return;
  const select = document.getElementById("log-task");
  const pre = document.getElementById("log-lines");
  const older = document.getElementById("log-older");
  const follow = document.getElementById("log-follow");
  const search = document.getElementById("log-search");
  const hits = document.getElementById("log-hits");
  const info = document.getElementById("log-info");
  let first = 0, last = 0, size = 0, source = null, retry = null;

  const url = (suffix, params) => box.dataset.base + encodeURIComponent(select.value) + suffix +
    (params ? "?" + new URLSearchParams(params).toString() : "");
  const say = () => { info.textContent = size ? `bytes ${first.toLocaleString()}-${last.toLocaleString()} of ${size.toLocaleString()}` : ""; };
  const text = (chunk) => chunk.lines.join("\n");

  function stopFollowing() { if (source) { source.close(); source = null; } }
  function startFollowing() {
    stopFollowing();
    if (!follow.checked || !window.EventSource) return;
    source = new EventSource(url("/follow", { from: last }));
    source.onmessage = (ev) => {
      const chunk = JSON.parse(ev.data);
      if (chunk.start !== last) return;
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
      if (chunk.lines.length) pre.append(document.createTextNode((pre.textContent ? "\n" : "") + text(chunk)));
      last = chunk.end; size = Math.max(size, chunk.size); say();
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    };
    source.addEventListener("end", stopFollowing);
  }
  async function load(params) {
    stopFollowing();
    clearTimeout(retry);
    const res = await fetch(url("", params), { credentials: "same-origin" });
    const chunk = await res.json();
    if (!res.ok) {  // not written yet (the task has not started): look again while following
      pre.textContent = chunk.error || "no log"; first = last = size = 0; say();
      if (follow.checked) retry = setTimeout(() => load(params), 1000);
      return;
    }
    pre.textContent = text(chunk);
    first = chunk.start; last = chunk.end; size = chunk.size; say();
    pre.scrollTop = params && params.start !== undefined ? 0 : pre.scrollHeight;
    if (last >= size) startFollowing();
  }
  older.addEventListener("click", async () => {
    if (first <= 0) return;
    const start = Math.max(0, first - 65536);
    const res = await fetch(url("", { start, length: first - start }), { credentials: "same-origin" });
    const chunk = await res.json();
    if (!res.ok || !chunk.lines.length) return;
    pre.prepend(document.createTextNode(text(chunk) + "\n"));
    first = chunk.start; say();
  });
  select.addEventListener("change", () => { hits.textContent = ""; load(); });
  follow.addEventListener("change", () => (follow.checked && last >= size ? startFollowing() : stopFollowing()));
  search.addEventListener("keydown", async (ev) => {
    if (ev.key !== "Enter") return;
    ev.preventDefault();
    hits.textContent = "";
    if (!search.value) return;
    const res = await fetch(url("/search", { q: search.value }), { credentials: "same-origin" });
    const found = await res.json();
    if (!res.ok) return;
    for (const hit of found.hits) {
      const li = document.createElement("li");
      li.textContent = hit.line;
      li.title = `byte ${hit.offset}`;
      li.addEventListener("click", () => { follow.checked = false; load({ start: hit.offset, length: 65536 }); });
      hits.append(li);
    }
    const li = document.createElement("li");
    li.className = "muted";
    li.textContent = `${found.hits.length} matching lines` + (found.complete ? "" : ` (searched ${found.searched.toLocaleString()} of ${found.size.toLocaleString()} bytes)`);
    hits.append(li);
  });
  load();
}

document.addEventListener("DOMContentLoaded", () => { liveSection(); logViewer(); });
