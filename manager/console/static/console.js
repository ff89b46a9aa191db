// x ticks as HH:MM:SS: uPlot's default shows sub-second marks (":35.950") while the span is short.
const hms = (t) => new Date(t * 1000).toTimeString().slice(0, 8);
// The console page: polls /api/status (manager/console/model.py builds it) and draws it.
// Every text from the cluster (host names, reasons) goes in with textContent, never as HTML:
// a crawled site names its own hosts and its errors.
"use strict";

const token = new URLSearchParams(location.search).get("token");
const api = "api/status" + (token ? "?token=" + encodeURIComponent(token) : "");
const COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#2c7a7b", "#975a16", "#4a5568"];
let chart = null, chartKey = "", timer = null;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function num(v, digits) {
  if (v === null || v === undefined) return "-";
  return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits || 0, minimumFractionDigits: digits || 0 });
}

// A table from column specs [header, value(row), cssClass] and rows; an empty list says so.
function fill(table, cols, rows, empty) {
  table.replaceChildren();
  const head = el("tr");
  cols.forEach(([h, , cls]) => head.appendChild(el("th", h, typeof cls === "function" ? "l" : cls)));
  table.appendChild(head);
  if (!rows.length) {
    const tr = el("tr"), td = el("td", empty || "none", "l muted");
    td.colSpan = cols.length;
    tr.appendChild(td);
    table.appendChild(tr);
    return;
  }
  rows.forEach(r => {
    const tr = el("tr");
    cols.forEach(([, f, cls]) => tr.appendChild(el("td", f(r), typeof cls === "function" ? cls(r) : cls)));
    table.appendChild(tr);
  });
}

function tiles(d) {
  const t = d.totals, st = d.storage;
  const items = [
    ["agents alive", `${t.agents_alive} / ${t.agents}`], ["pages", num(t.pages)], ["pages/s", num(t.pages_per_second, 1)],
    ["queued URLs", num(t.queue)], ["in flight", num(t.in_flight)], ["errors", num(t.errors)],
    ["parked", num(t.parked)], ["given up", num(t.given_up)],
  ];
  if (st && !st.error) items.push(["stored pages", num(st.pages)]);
  const box = document.getElementById("tiles");
  box.replaceChildren(...items.map(([k, v]) => {
    const tile = el("div", null, "tile");
    tile.append(el("div", v, "v"), el("div", k, "k"));
    return tile;
  }));
}

function drawChart(d) {
  const ids = Object.keys(d.history.agents).sort();
  const key = ids.join(",");
  const data = [d.history.t, d.history.total, ...ids.map(i => d.history.agents[i])];
  const box = document.getElementById("chart");
  if (!chart || key !== chartKey) {
    if (chart) chart.destroy();
    const series = [{}, { label: "total", stroke: "#1d232b", width: 2 }]
      .concat(ids.map((id, i) => ({ label: id, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false })));
    chart = new uPlot({ width: box.clientWidth || 800, height: 240, series,
                        axes: [{ incrs: [1, 5, 10, 15, 30, 60, 120, 300, 600], values: (u, ticks) => ticks.map(hms) }, { label: "pages/s" }], scales: { x: { time: true } } }, data, box);
    chartKey = key;
  } else {
    chart.setData(data);
  }
}

function grid(d) {
  const box = document.getElementById("grid");
  if (d.mode === "kademlia") {
    box.replaceChildren(el("p", "Kademlia mode: no consultant, so no places; the agents are listed below.", "muted"));
    return;
  }
  const isps = [...new Set(d.agents.map(a => a.isp || "-"))].sort();
  const cities = [...new Set(d.agents.map(a => a.city || "-"))].sort();
  const table = el("table"), head = el("tr");
  head.appendChild(el("th", "ISP \\ city", "l"));
  cities.forEach(c => head.appendChild(el("th", c, "l")));
  table.appendChild(head);
  isps.forEach(isp => {
    const tr = el("tr");
    tr.appendChild(el("th", isp, "l"));
    cities.forEach(city => {
      const td = el("td");
      d.agents.filter(a => (a.isp || "-") === isp && (a.city || "-") === city).forEach(a => {
        const kind = a.state === "alive" && a.idle ? "idle" : a.state;
        const chip = el("span", `${a.agent_id} · ${num(a.pages_per_second, 1)}/s`, "chip " + kind);
        chip.title = `${a.agent_id} (${a.address}): ${a.state}${a.idle ? ", idle" : ""}, ${num(a.pages)} pages, queue ${num(a.queue)}`;
        td.appendChild(chip);
      });
      tr.appendChild(td);
    });
    table.appendChild(tr);
  });
  box.replaceChildren(table);
}

function tables(d) {
  fill(document.getElementById("agents"), [
    ["agent", a => a.agent_id, "l"], ["state", a => a.state + (a.state === "alive" && a.idle ? " (idle)" : ""), a => "l state-" + a.state],
    ["ISP/city", a => `${a.isp || "-"}/${a.city || "-"}`, "l"], ["pages", a => num(a.pages)],
    ["pages/s", a => num(a.pages_per_second, 1)], ["queue", a => num(a.queue)], ["in flight", a => num(a.in_flight)],
    ["hosts", a => num(a.hosts)], ["load L", a => (a.load_level >= 0 ? "+" : "") + num(a.load_level, 1)],
    ["errors", a => num(a.errors)], ["parked", a => num(a.parked)], ["given up", a => num(a.given_up)],
    ["spool", a => num(a.spool)], ["replicas", a => num(a.replicas)], ["repl lag", a => a.repl_lag],
  ], d.agents, "no agent is registered");
  fill(document.getElementById("hosts"), [
    ["host", h => h.host, "l"], ["pages", h => num(h.pages)], ["MB", h => num(h.bytes / 1e6, 1)],
    ["give-ups", h => num(h.give_ups)], ["top by", h => h.top_by, "l"],
  ], d.top_hosts, "no host has cost anything yet");
  fill(document.getElementById("incidents"), [
    ["what", i => i.what, "l"], ["count", i => num(i.count)],
  ], d.incidents.filter(i => i.count > 0), "none so far");
  const left = d.parked.map(p => ({ host: p.host, agent: p.agent, what: `parked, next try in ${num(p.next_try_in)} s`, reason: p.reason }))
    .concat(d.given_up.map(g => ({ host: g.host, agent: g.agent, what: "given up: " + g.kind, reason: g.reason })));
  fill(document.getElementById("left"), [
    ["host", r => r.host, "l"], ["agent", r => r.agent, "l"], ["", r => r.what, "l"], ["why", r => r.reason, "reason"],
  ], left, "nothing parked or given up");
}

function storage(d) {
  const panel = document.getElementById("storage-panel");
  panel.hidden = !d.storage;
  if (!d.storage) return;
  const st = d.storage;
  document.getElementById("storage-totals").textContent = st.error ? "storage: " + st.error
    : `${num(st.pages)} pages stored, compression ratio ${num(st.compression_ratio, 2)}`;
  fill(document.getElementById("writers"), [
    ["writer", w => w.writer_id || w.sink || "-", "l"], ["address", w => w.address, "l"], ["state", w => w.up ? "up" : "down", "l"],
    ["pages", w => num(w.pages)], ["lag s", w => num(w.lag, 1)], ["queued", w => num(w.queued_batches)],
  ], d.writers, "no writer listed");
}

function render(d) {
  document.getElementById("placing").textContent = d.mode === "kademlia"
    ? `Kademlia mode (no consultant), epoch ${d.epoch}` : `strategy ${d.strategy}, epoch ${d.epoch}`;
  const phase = document.getElementById("phase");
  const none = d.totals.agents_alive === 0;
  phase.textContent = none ? "no live agent" : d.idle ? "finished: nothing fetchable is left" : "crawling";
  phase.className = "badge " + (none ? "" : d.idle ? "idle" : "crawling");
  document.getElementById("updated").textContent = "updated " + new Date(d.time * 1000).toLocaleTimeString();
  tiles(d);
  drawChart(d);
  grid(d);
  tables(d);
  storage(d);
  document.getElementById("notbuilt").replaceChildren(...d.not_built.map(t => el("li", t)));
}

async function tick() {
  let interval = 1000;
  const banner = document.getElementById("error");
  try {
    const r = await fetch(api, { cache: "no-store" });
    if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
    const d = await r.json();
    interval = Math.max(500, (d.interval || 1) * 1000);
    banner.hidden = !d.error;
    banner.textContent = d.error ? "the cluster did not answer: " + d.error : "";
    if (d.totals) render(d);
    document.body.dataset.polls = String((Number(document.body.dataset.polls) || 0) + 1);
  } catch (e) {
    banner.hidden = false;
    banner.textContent = "the console did not answer: " + e.message;
  }
  timer = setTimeout(tick, interval);
}

tick();
