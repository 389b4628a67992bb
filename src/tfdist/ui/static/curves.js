// Curves from the job store's progress reports, drawn by plotly.js (served from the plotly
// Python package). Stragglers are drawn dashed and named; with one running job the charts
// redraw when new reports arrive.
"use strict";

(function () {
  const box = document.getElementById("curves");
  if (!box || !window.Plotly) return;
  const xaxis = document.getElementById("xaxis");
  const charts = [["loss", "loss"], ["accuracy", "accuracy"], ["examples_per_sec", "examples/s"]];
  let data = {};

  function draw() {
    const x = xaxis.value;
    const stragglers = [];
    for (const [key, title] of charts) {
      const traces = [];
      for (const [job, d] of Object.entries(data)) {
        for (const [task, s] of Object.entries(d.tasks)) {
          const slow = d.stragglers.includes(task);
          if (slow && key === "loss") stragglers.push(`${job} ${task}`);
          if (!s[key].some((v) => v !== null)) continue;
          const name = (Object.keys(data).length > 1 ? job + " " : "") + task + (slow ? " (straggler)" : "");
          traces.push({ x: s[x], y: s[key], name, mode: "lines+markers", type: "scatter",
                        line: slow ? { dash: "dash" } : {} });
        }
      }
      const chart = document.getElementById("chart-" + key);
      chart.hidden = !traces.length;  // no task reported it
      if (!traces.length) continue;
      Plotly.react(chart, traces, {
        title: { text: title }, margin: { t: 36, r: 10, b: 36, l: 50 },
        xaxis: { title: { text: x === "step" ? "step" : "seconds since start" } },
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
