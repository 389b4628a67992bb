// Curves from the job store's progress reports, drawn by plotly.js (served from the plotly
// Python package): one chart per value reported, validation dotted beside training,
// restarts as dotted vertical lines. Stragglers are drawn dashed and named; with one
// running job the charts redraw when new reports arrive.
"use strict";

(function () {
  const box = document.getElementById("curves");
  if (!box || !window.Plotly) return;
  const xaxis = document.getElementById("xaxis");
  const titles = { loss: "loss", examples_per_sec: "examples/s", steps_per_sec: "steps/s" };
  let data = {};

  // loss first, then the metrics as reported (val_x drawn on x's chart), the rates last;
  // steps/s only when no task knows its examples/s
  function chartKeys() {
    const seen = new Set();
    for (const d of Object.values(data))
      for (const t of Object.values(d.tasks))
        for (const name of Object.keys(t.series)) seen.add(name.startsWith("val_") && name.length > 4 ? name.slice(4) : name);
    const metrics = [...seen].filter((k) => !(k in titles));
    const rates = seen.has("examples_per_sec") ? ["examples_per_sec"] : seen.has("steps_per_sec") ? ["steps_per_sec"] : [];
    return [...(seen.has("loss") ? ["loss"] : []), ...metrics, ...rates];
  }

  function chartBox(key) {
    let chart = document.getElementById("chart-" + key);
    if (!chart) {
      chart = document.createElement("div");
      chart.className = "chart";
      chart.id = "chart-" + key;
      box.append(chart);
    }
    return chart;
  }

  // a dotted vertical line where each attempt after the first began
  function restartShapes(x) {
    const shapes = [], notes = [];
    for (const [job, d] of Object.entries(data)) {
      for (const r of d.restarts || []) {
        const at = r[x];
        if (at === null || at === undefined) continue;
        shapes.push({ type: "line", xref: "x", yref: "paper", x0: at, x1: at, y0: 0, y1: 1,
                      line: { dash: "dot", width: 1, color: "#b42318" } });
        const who = r.tasks.join(", ") + (r.more ? ` and ${r.more} more` : "");
        notes.push({ x: at, xref: "x", y: 1, yref: "paper", yanchor: "bottom", showarrow: false,
                     font: { size: 10, color: "#b42318" },
                     text: (Object.keys(data).length > 1 ? job + " " : "") + "restart " + r.attempt,
                     hovertext: "attempt " + r.attempt + ": " + who });
      }
    }
    return { shapes, notes };
  }

  function draw() {
    const x = xaxis.value;
    const stragglers = [];
    const many = Object.keys(data).length > 1;
    for (const [job, d] of Object.entries(data))
      for (const task of d.stragglers) stragglers.push(`${job} ${task}`);
    const keys = chartKeys();
    for (const chart of box.querySelectorAll(".chart")) chart.hidden = !keys.includes(chart.id.slice(6));
    const marks = restartShapes(x);
    for (const key of keys) {
      const traces = [];
      for (const [job, d] of Object.entries(data)) {
        for (const [task, t] of Object.entries(d.tasks)) {
          const slow = d.stragglers.includes(task);
          for (const name of [key, "val_" + key]) {
            const s = t.series[name];
            if (!s || !s.y.length) continue;
            const val = name !== key;
            traces.push({ x: s[x], y: s.y, mode: "lines+markers", type: "scatter",
                          name: (many ? job + " " : "") + task + (val ? " validation" : "") + (slow ? " (straggler)" : ""),
                          line: { dash: val ? "dot" : slow ? "dash" : "solid" }, marker: { size: 4 } });
          }
        }
      }
      Plotly.react(chartBox(key), traces, {
        title: { text: titles[key] || key }, margin: { t: 36, r: 10, b: 36, l: 50 },
        xaxis: { title: { text: x === "step" ? "step" : "seconds since start" } },
        shapes: marks.shapes, annotations: marks.notes,
      }, { displaylogo: false, responsive: true });
    }
    document.getElementById("stragglers").textContent = stragglers.length ? "stragglers: " + stragglers.join(", ") : "";
    const tb = document.getElementById("tensorboard");
    tb.textContent = "";
    for (const [job, d] of Object.entries(data)) {
      if (d.tensorboard && /^https?:\/\//.test(d.tensorboard)) {
        const a = document.createElement("a");
        a.href = d.tensorboard; a.rel = "noreferrer"; a.textContent = `TensorBoard (${job})`;
        tb.append(a, " ");
      }
    }
  }
  async function fetchData() {
    const res = await fetch("/api/curves?" + new URLSearchParams({ jobs: box.dataset.jobs }), { credentials: "same-origin" });
    if (res.ok) { data = await res.json(); draw(); }
  }
  xaxis.addEventListener("change", draw);
  fetchData();
  if (box.dataset.events && window.EventSource) {  // redraw at most every 2 s
    let queued = false;
    new EventSource(box.dataset.events).addEventListener("change", () => {
      if (queued) return;
      queued = true;
      setTimeout(() => { queued = false; fetchData(); }, 2000);
    });
  }
})();
