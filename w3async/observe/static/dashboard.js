// The run dashboard: polls /status, /series and /games and draws the plots on
// <canvas>. No library, no build step, nothing from another host. window.w3Status
// tells a test (or a curious person) what was drawn: {plots: {name: points}, ...}.
"use strict";

window.w3Status = { plots: {}, refreshes: 0, errors: [], viewer: {} };

const REFRESH_MS = 2000;
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"];
const PLOT_NAMES = ["steps_per_s", "win_rate", "latency_ms", "update_s", "restarts", "discarded", "cores", "memory_mb"];

function fmt(v, digits) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return String(v);
  if (Math.abs(v) >= 1e4) return Math.round(v).toLocaleString("en");
  return v.toFixed(digits === undefined ? 1 : digits);
}

function fmtTime(s, span) {
  if (span !== undefined && span < 10) return s.toFixed(1) + "s";
  if (s < 120) return Math.round(s) + "s";
  if (s < 7200) return Math.round(s / 60) + "m";
  return (s / 3600).toFixed(1) + "h";
}

// Draws lines [{label, t, y}] on a canvas; returns how many points it drew.
function drawPlot(canvas, lines, opts) {
  const ctx = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height;
  const L = 48, R = 8, T = 8, B = 34;
  ctx.clearRect(0, 0, W, H);
  ctx.font = "11px system-ui, sans-serif";
  let tmin = Infinity, tmax = -Infinity, ymax = -Infinity, ymin = 0, n = 0;
  for (const ln of lines) {
    for (let i = 0; i < ln.t.length; i++) {
      tmin = Math.min(tmin, ln.t[i]); tmax = Math.max(tmax, ln.t[i]);
      ymax = Math.max(ymax, ln.y[i]); ymin = Math.min(ymin, ln.y[i]);
    }
  }
  ctx.strokeStyle = "#ccc";
  ctx.strokeRect(L, T, W - L - R, H - T - B);
  if (!(tmax >= tmin)) {
    ctx.fillStyle = "#999";
    ctx.fillText("no data yet", L + 10, T + 20);
    return 0;
  }
  if (opts.ymax !== undefined) ymax = opts.ymax;
  if (!(ymax > ymin)) ymax = ymin + 1;
  ymax *= opts.ymax !== undefined ? 1 : 1.08;
  if (tmax === tmin) { tmin -= 1; tmax += 1; }
  const x = (t) => L + (t - tmin) / (tmax - tmin) * (W - L - R);
  const y = (v) => T + (1 - (v - ymin) / (ymax - ymin)) * (H - T - B);
  ctx.fillStyle = "#666";
  ctx.textAlign = "right";
  for (let k = 0; k <= 4; k++) {
    const v = ymin + (ymax - ymin) * k / 4;
    ctx.fillText(fmt(v, ymax < 10 ? 2 : 0), L - 4, y(v) + 4);
    ctx.strokeStyle = "#eee";
    ctx.beginPath(); ctx.moveTo(L, y(v)); ctx.lineTo(W - R, y(v)); ctx.stroke();
  }
  ctx.textAlign = "center";
  for (let k = 0; k <= 4; k++) {
    const t = tmin + (tmax - tmin) * k / 4;
    ctx.fillText(fmtTime(t, tmax - tmin), x(t), H - B + 14);
  }
  let lx = L + 4;
  lines.forEach((ln, j) => {
    const c = COLORS[j % COLORS.length];
    ctx.strokeStyle = c; ctx.fillStyle = c; ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (let i = 0; i < ln.t.length; i++) {
      const px = x(ln.t[i]), py = y(ln.y[i]);
      if (i === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
      n++;
    }
    ctx.stroke();
    if (ln.t.length === 1) { ctx.beginPath(); ctx.arc(x(ln.t[0]), y(ln.y[0]), 2.5, 0, 7); ctx.fill(); }
    ctx.textAlign = "left";
    ctx.fillText(ln.label, lx, H - 4);
    lx += ctx.measureText(ln.label).width + 14;
  });
  ctx.lineWidth = 1;
  return n;
}

function card(label, value) {
  const d = document.createElement("div");
  d.className = "card";
  const b = document.createElement("b"); b.textContent = value;
  const s = document.createElement("span"); s.textContent = label;
  d.append(b, s);
  return d;
}

function showStatus(st) {
  document.getElementById("run-name").textContent = st.run.name + (st.run.recipe ? " · " + st.run.recipe : "");
  const pill = document.getElementById("run-state");
  pill.textContent = st.run.live ? "live" : (st.run.error ? "stopped: " + st.run.error : "ended");
  pill.className = "pill " + (st.run.live ? "live" : "ended");
  document.getElementById("updated").textContent = "updated " + st.time;
  const g = st.games, inf = st.inference, le = st.learner;
  const cards = [
    ["uptime", fmtTime(st.run.uptime_s || 0)],
    ["agent steps", fmt(st.steps.agent_steps, 0)],
    ["steps/s", fmt(st.steps.per_s, 0)],
    ["games up / restarting / failed", `${g.alive} / ${g.restarting} / ${g.failed}`],
    ["restarts", fmt(g.restarts, 0)],
    ["rounds/s", fmt(inf.rounds_per_s, 0)],
    ["rows/round", fmt(inf.rows_per_round, 1)],
    ["latency ms (p95)", `${fmt(inf.latency_ms_mean, 2)} (${fmt(inf.latency_ms_p95, 2)})`],
    ["updates", fmt(le.updates, 0)],
    ["update / wait s", `${fmt(le.update_s, 2)} / ${fmt(le.wait_s, 2)}`],
  ];
  for (const [lvl, e] of Object.entries(st.evaluation)) {
    const pct = (x) => fmt(x === null || x === undefined ? null : 100 * x, 0);
    cards.push([`vs ${lvl} (${e.games} games, recent ${e.recent_games}): wins, decisive`,
      `${pct(e.win_rate)}% (${pct(e.recent_win_rate)}%), decisive ${pct(e.decisive_rate)}% (${pct(e.recent_decisive_rate)}%)`]);
  }
  if (st.checkpoint) cards.push(["checkpoint", `${st.checkpoint.name} (${fmtTime(st.checkpoint.age_s)} ago)`]);
  const b = st.best;
  if (b && b.by === "return") {  // a game scored by points: each level's mean return
    const lv = Object.entries(b.levels || {}).map(([l, e]) => `${l.split(":").pop()} ${fmt(e.mean_return, 2)}`).join(", ");
    cards.push([`best.pt (update ${b.updates}, last ${b.window} episodes a level)`, `mean return ${fmt(b.score, 2)}: ${lv}`]);
  } else if (b) {
    const lv = Object.entries(b.levels || {}).map(([l, e]) =>
      `${l.split(":").pop()} ${fmt(100 * e.win_rate, 0)}% [${fmt(100 * e.lo, 0)}-${fmt(100 * e.hi, 0)}]` +
      (e.decisive_rate === undefined ? "" : ` (${fmt(100 * e.decisive_rate, 0)}% decisive)`)).join(", ");
    cards.push([`best.pt (update ${b.updates}, last ${b.window} games a level)`, `${fmt(100 * b.score, 0)}%: ${lv}`]);
  }
  document.getElementById("summary").replaceChildren(...cards.map(([l, v]) => card(l, v)));
}

// The evaluation videos (videos/ in the run folder), newest first: one link each.
function showVideos(videos) {
  const items = (videos || []).map((v) => {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = v.url; a.textContent = v.name;
    const s = document.createElement("span"); s.className = "dim"; s.textContent = ` ${fmt(v.bytes / 1024, 0)} KiB, ${v.saved_at}`;
    li.append(a, s);
    return li;
  });
  if (!items.length) {
    const li = document.createElement("li"); li.className = "dim"; li.textContent = "none yet";
    items.push(li);
  }
  document.getElementById("videos").replaceChildren(...items);
  window.w3Status.videos = (videos || []).map((v) => v.url);
}

function tableRow(values) {
  const tr = document.createElement("tr");
  for (const v of values) {
    const td = document.createElement("td");
    td.textContent = v === null || v === undefined ? "–" : v;
    tr.append(td);
  }
  return tr;
}

function showGames(games) {
  const rows = games.map((g) => {
    const causes = Object.entries(g.causes || {}).map(([k, v]) => `${k} ${v}`).join(", ");
    return tableRow([g.slot, g.host || "here", g.pid, g.runtime, g.role, g.lanes, g.state, g.steps, g.restarts, causes,
      g.last_step_age_s, fmt(g.cpu, 2), fmt(g.rss_mb, 1)]);
  });
  document.querySelector("#games tbody").replaceChildren(...rows);
}

// A run with game hosts ([cluster]): one line per host, from /status.
function showHosts(hosts) {
  document.getElementById("hosts-section").hidden = !hosts || hosts.length === 0;
  const rows = (hosts || []).map((h) => tableRow([h.name, (h.node || "").slice(0, 12),
    h.up ? `${h.games_up} / ${h.games}` : "lost", fmt(h.steps_per_s, 0), fmt(h.round_trip_ms, 2), h.restarts, h.deaths,
    fmt(h.bytes_per_row, 0)]));
  document.querySelector("#hosts tbody").replaceChildren(...rows);
}

async function getJson(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.json();
}

async function refresh() {
  try {
    const [st, series, games] = await Promise.all([getJson("/status"), getJson("/series"), getJson("/games")]);
    showStatus(st);
    showGames(games.games);
    showHosts(st.hosts);
    showVideos(st.videos);
    for (const name of PLOT_NAMES) {
      const canvas = document.getElementById("plot-" + name);
      const opts = name === "win_rate" ? { ymax: 1 } : {};
      window.w3Status.plots[name] = drawPlot(canvas, series.plots[name] || [], opts);
    }
    window.w3Status.last = st;
    window.w3Status.refreshes++;
  } catch (e) {
    // A server that went away (the run ended) is not a page error: keep the last picture.
    window.w3Status.errors.push(String(e));
    document.getElementById("run-state").textContent = "unreachable";
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
