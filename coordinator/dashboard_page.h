// The dashboard's page and script (served by coordinator/dashboard.h): a
// list of jobs and workers, and a job page with the live loss curve (one
// SVG point per aggregated step that has a loss), each rank's step time at
// the newest step with the part spent waiting for the others and loading
// data (stragglers marked), the job's events and the tail of a
// rank's log. Everything it shows comes from the dashboard's JSON API and
// is put in the page as text (textContent), never as markup.
#ifndef FRAMEWORM_COORDINATOR_DASHBOARD_PAGE_H_
#define FRAMEWORM_COORDINATOR_DASHBOARD_PAGE_H_

namespace frameworm::coordinator {

inline constexpr char kDashboardHtml[] = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Frameworm</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 20px; margin: 0 0 .6em; } h2 { font-size: 16px; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: left; }
th { background: #f4f4f4; } a { color: #0645ad; }
.state-RUNNING { color: #0a7d2c; } .state-FAILED { color: #b00020; } .state-SUCCEEDED { color: #2450a6; }
.straggler { color: #b00020; font-weight: bold; }
pre { background: #f7f7f7; padding: 8px; max-height: 260px; overflow: auto; font-size: 12px; }
#curve { border: 1px solid #ccc; background: #fff; }
.muted { color: #777; }
</style>
</head>
<body>
<h1><a href="#">Frameworm</a> <span id="where" class="muted"></span></h1>
<div id="overview">
  <h2>Jobs</h2>
  <table id="jobs"><thead><tr><th>ID</th><th>Name</th><th>State</th><th>Gen</th><th>Restarts</th><th>Step</th><th>Loss</th><th>Workers</th></tr></thead><tbody></tbody></table>
  <h2>Workers</h2>
  <table id="workers"><thead><tr><th>Name</th><th>Address</th><th>Slots</th><th>Free</th><th>Alive</th><th>Tasks</th></tr></thead><tbody></tbody></table>
</div>
<div id="job" hidden>
  <div id="summary"></div>
  <h2>Loss</h2>
  <svg id="curve" width="720" height="260" viewBox="0 0 720 260"><polyline id="loss" fill="none" stroke="#2450a6" stroke-width="1.5" points=""></polyline></svg>
  <div id="range" class="muted"></div>
  <h2>Step time per rank (newest step)</h2>
  <table id="ranks"><thead><tr><th>Rank</th><th>Step seconds</th><th>Waiting for others</th><th>Data</th><th></th></tr></thead><tbody></tbody></table>
  <h2>Events</h2>
  <table id="events"><thead><tr><th>Time</th><th>Kind</th><th>What</th></tr></thead><tbody></tbody></table>
  <h2>Log of rank <select id="rank"></select></h2>
  <pre id="log"></pre>
</div>
<script src="/app.js"></script>
</body>
</html>
)html";

inline constexpr char kDashboardJs[] = R"js("use strict";
const $ = (id) => document.getElementById(id);
async function get(path) {
  const r = await fetch(path, {cache: "no-store"});
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
  const type = r.headers.get("Content-Type") || "";
  return type.startsWith("application/json") ? r.json() : r.text();
}
function row(table, cells, classes) {
  const tr = document.createElement("tr");
  cells.forEach((c, i) => {
    const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c === undefined ? "" : String(c);
    if (classes && classes[i]) td.className = classes[i];
    tr.appendChild(td);
  });
  $(table).tBodies[0].appendChild(tr);
}
function clear(table) { $(table).tBodies[0].replaceChildren(); }
function link(text, href) { const a = document.createElement("a"); a.textContent = text; a.href = href; return a; }
function time(ms) { return ms ? new Date(Number(ms)).toLocaleTimeString() : ""; }
function loss(status) { const m = (status.last || {}).mean || {}; return m.loss === undefined ? "" : m.loss.toFixed(4); }

// Every page of /api/jobs, in submission order (at most 50 pages of 1,000).
async function allJobs() {
  let jobs = [], token = "";
  for (let i = 0; i < 50; i++) {
    const page = await get("/api/jobs?page_size=1000" + (token ? "&page_token=" + encodeURIComponent(token) : ""));
    jobs = jobs.concat(page.jobs || []);
    token = page.next_page_token || "";
    if (!token) break;
  }
  return jobs;
}

async function overview() {
  const [jobs, workers] = await Promise.all([allJobs(), get("/api/workers")]);
  clear("jobs");
  for (const j of jobs) {
    row("jobs", [link(j.job_id, "#job/" + j.job_id), (j.spec || {}).name, j.state, j.generation || 0,
                 j.restarts || 0, (j.step || 0) + (j.total_steps ? "/" + j.total_steps : ""), loss(j),
                 (j.workers || []).join(", ")], [null, null, "state-" + j.state]);
  }
  clear("workers");
  for (const w of workers.workers || []) {
    row("workers", [w.name, w.address, w.slots, w.free_slots || 0, w.alive ? "yes" : "no",
                    (w.running_tasks || []).join(", ")]);
  }
}

function drawCurve(steps) {
  const pts = steps.filter((s) => s.mean && s.mean.loss !== undefined).map((s) => [Number(s.step), s.mean.loss]);
  const line = $("loss");
  line.dataset.points = String(pts.length);
  if (pts.length === 0) { line.setAttribute("points", ""); $("range").textContent = "no loss reported yet"; return; }
  const W = 720, H = 260, pad = 24;
  const x0 = pts[0][0], x1 = pts[pts.length - 1][0] || x0 + 1;
  let lo = Math.min(...pts.map((p) => p[1])), hi = Math.max(...pts.map((p) => p[1]));
  if (hi === lo) { hi += 1; lo -= 1; }
  const sx = (x) => pad + (W - 2 * pad) * (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0));
  const sy = (y) => H - pad - (H - 2 * pad) * (y - lo) / (hi - lo);
  line.setAttribute("points", pts.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" "));
  $("range").textContent = pts.length + " steps (" + x0 + " to " + pts[pts.length - 1][0] + "), loss " +
      hi.toFixed(4) + " to " + lo.toFixed(4);
}

let shownRank = "0";
async function jobPage(id) {
  const [st, metrics, events] = await Promise.all([
    get("/api/jobs/" + id), get("/api/jobs/" + id + "/metrics"), get("/api/jobs/" + id + "/events")]);
  const s = $("summary");
  s.replaceChildren();
  const h = document.createElement("h2");
  h.textContent = st.job_id + " " + ((st.spec || {}).name || "") + ": " + st.state +
      ", generation " + (st.generation || 0) + ", step " + (st.step || 0) +
      (st.total_steps ? "/" + st.total_steps : "") + ", restarts " + (st.restarts || 0);
  h.className = "state-" + st.state;
  s.appendChild(h);
  for (const [k, v] of [["reason", st.reason], ["last cause", st.last_cause], ["warning", st.warning],
                        ["workers", (st.workers || []).join(", ")], ["TensorBoard", st.tensorboard_dir]]) {
    if (!v) continue;
    const p = document.createElement("div");
    p.textContent = k + ": " + v;
    s.appendChild(p);
  }
  const steps = metrics.steps || [];
  drawCurve(steps);
  clear("ranks");
  const last = steps.length ? steps[steps.length - 1] : {};
  const slow = new Set((last.stragglers || []).map(Number));
  const wait = last.rank_wait_seconds || [], data = last.rank_data_seconds || [];
  (last.rank_step_seconds || []).forEach((t, r) => {
    row("ranks", [r, Number(t).toFixed(4), Number(wait[r] || 0).toFixed(4), Number(data[r] || 0).toFixed(4),
                  slow.has(r) ? "straggler" : ""], [null, null, null, null, slow.has(r) ? "straggler" : null]);
  });
  clear("events");
  for (const e of (events.events || []).slice(-100).reverse()) row("events", [time(e.unix_ms), e.kind, e.message]);
  const sel = $("rank");
  const world = Math.max(1, (last.rank_step_seconds || []).length);
  if (sel.options.length !== world) {
    sel.replaceChildren();
    for (let r = 0; r < world; r++) { const o = document.createElement("option"); o.value = o.textContent = String(r); sel.appendChild(o); }
    sel.value = shownRank;
  }
  const log = $("log");
  const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = await get("/api/jobs/" + id + "/logs?rank=" + encodeURIComponent(sel.value));
  if (atEnd) log.scrollTop = log.scrollHeight;  // follow the tail unless scrolled up
}

async function refresh() {
  const m = location.hash.match(/^#job\/([A-Za-z0-9_.-]+)$/);
  $("overview").hidden = !!m;
  $("job").hidden = !m;
  $("where").textContent = m ? "/ " + m[1] : "";
  try {
    if (m) await jobPage(m[1]); else await overview();
    document.body.dataset.loaded = "yes";
  } catch (err) {
    $("where").textContent = String(err.message || err);
  }
}
$("rank").addEventListener("change", () => { shownRank = $("rank").value; refresh(); });
window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, 2000);
)js";

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_DASHBOARD_PAGE_H_
