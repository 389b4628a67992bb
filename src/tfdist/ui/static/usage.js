// Resource use on a job's page: CPU (cores) and memory (RSS) of each task as small SVG
// charts, each task's memory limit as a dashed line, and the use per host. Drawn here from
// /api/jobs/ID/usage (no plotly: the job page stays light), redrawn every few seconds
// while the job runs. Every text is set with textContent.
"use strict";

(function () {
  const box = document.getElementById("resources");
  if (!box) return;
  const NS = "http://www.w3.org/2000/svg";
  const W = 600, H = 150, LEFT = 56, BOTTOM = 16;
  const colors = ["#2e90fa", "#f04438", "#12b76a", "#f79009", "#7a5af8", "#ee46bc", "#0ba5ec", "#667085"];
  const info = document.getElementById("usage-info");
  const hostTable = document.getElementById("usage-hosts");

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function size(n) {
    for (const [u, s] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]])
      if (n >= s) return (n / s).toFixed(n < 10 * s ? 1 : 0) + " " + u;
    return n + " B";
  }

  // one chart: a polyline per task of key, and (memory) each distinct limit dashed
  function chart(svg, tasks, key, t0, t1, label) {
    svg.replaceChildren();
    let top = 0;
    for (const s of Object.values(tasks))
      for (let i = 0; i < s.time.length; i++) {
        top = Math.max(top, s[key][i] || 0);
        if (key === "rss" && s.limit[i]) top = Math.max(top, s.limit[i]);
      }
    top = top > 0 ? top * 1.05 : 1;
    const span = Math.max(t1 - t0, 1);
    const x = (t) => LEFT + (W - LEFT - 4) * (t - t0) / span;
    const y = (v) => 4 + (H - BOTTOM - 8) * (1 - v / top);
    svg.append(el("text", { x: 2, y: 12, class: "axis" }, label(top)));
    svg.append(el("text", { x: 2, y: H - BOTTOM, class: "axis" }, label(0)));
    svg.append(el("text", { x: W - 4, y: H - 2, class: "axis", "text-anchor": "end" }, Math.round(span) + " s"));
    let n = 0, points = 0;
    const limits = new Set();
    for (const [task, s] of Object.entries(tasks)) {
      const pts = [];
      for (let i = 0; i < s.time.length; i++) {
        const v = s[key][i];
        if (v === null || v === undefined) continue;
        pts.push(x(s.time[i]).toFixed(1) + "," + y(v).toFixed(1));
        if (key === "rss" && s.limit[i]) limits.add(s.limit[i]);
      }
      points += pts.length;
      const line = el("polyline", { points: pts.join(" "), fill: "none", stroke: colors[n++ % colors.length],
                                     "stroke-width": 1.5, class: "task-line", "data-task": task });
      line.append(el("title", {}, task));
      svg.append(line);
    }
    for (const limit of limits) {
      const line = el("line", { x1: LEFT, x2: W - 4, y1: y(limit), y2: y(limit), class: "limit-line",
                                 stroke: "#b42318", "stroke-dasharray": "5,4" });
      line.append(el("title", {}, "memory limit " + size(limit)));
      svg.append(line);
    }
    svg.dataset.points = String(points);
  }

  function row(cells, tag) {
    const tr = document.createElement("tr");
    for (const v of cells) {
      const td = document.createElement(tag);
      td.textContent = v;
      tr.append(td);
    }
    return tr;
  }

  // the running tasks' use summed per host
  function hosts(list) {
    if (!hostTable) return;
    hostTable.replaceChildren();
    hostTable.hidden = !list.length;
    if (!list.length) return;
    const head = document.createElement("thead"), body = document.createElement("tbody");
    head.append(row(["host", "running tasks", "cpu (cores)", "memory (RSS)"], "th"));
    for (const h of list) body.append(row([h.host, String(h.tasks), h.cpu.toFixed(2), size(h.rss)], "td"));
    hostTable.append(head, body);
  }

  // which colour is which task (the first 12; hovering a line names it too)
  function legend(names) {
    const box = document.getElementById("usage-legend");
    if (!box) return;
    box.replaceChildren();
    names.slice(0, 12).forEach((name, i) => {
      const item = document.createElement("span");
      item.style.color = colors[i % colors.length];
      item.textContent = "— " + name;
      box.append(item);
    });
    if (names.length > 12) box.append(document.createTextNode(" and " + (names.length - 12) + " more"));
  }

  async function load() {
    let data;
    try {
      const res = await fetch(box.dataset.src, { credentials: "same-origin" });
      if (!res.ok) return true;
      data = await res.json();
    } catch (e) { return true; }
    let t0 = Infinity, t1 = -Infinity;
    for (const s of Object.values(data.tasks))
      if (s.time.length) { t0 = Math.min(t0, s.time[0]); t1 = Math.max(t1, s.time[s.time.length - 1]); }
    const any = t0 !== Infinity;
    box.querySelector(".usage-charts").hidden = !any;
    if (any) {
      chart(document.getElementById("usage-cpu"), data.tasks, "cpu", t0, t1, (v) => v.toFixed(2) + " cores");
      chart(document.getElementById("usage-memory"), data.tasks, "rss", t0, t1, size);
      legend(Object.keys(data.tasks));
    }
    hosts(data.hosts);
    const live = data.state === "running" || data.state === "submitted";
    info.textContent = !data.sampled ? "this backend's tasks are not sampled (see its own dashboard)"
      : !any ? (live ? "no samples yet" : "no samples: the tasks ended before the first one was taken")
      : data.samples + " samples" + (data.task_count > Object.keys(data.tasks).length
        ? " of " + Object.keys(data.tasks).length + " of the " + data.task_count + " tasks (those near their memory limit, then the most memory)"
        : "");
    return live;
  }

  async function loop() {
    if (await load()) setTimeout(loop, 3000);
  }
  loop();
})();
