// The game viewer: the latest evaluation game's replay (/replay/latest, the format in
// docs/status.md) on a canvas: the map, units by owner and type, hit points, orders
// and targets, and the fog of the agent's side. Play, pause, step, slider.
"use strict";

(function () {
  const OWNER_COLORS = ["#1f5fbf", "#c0392b", "#7f7f7f"];
  const TYPE_LETTERS = ["B", "m", "r", "H", "c", "X"];
  const PLAY_MS = 120;
  const RELOAD_MS = 2000;  // a check of /status's replay path, already fetched by the dashboard

  const canvas = document.getElementById("viewer-canvas");
  const slider = document.getElementById("viewer-slider");
  const label = document.getElementById("viewer-label");
  const playBtn = document.getElementById("viewer-play");
  const V = { data: null, path: null, step: 0, timer: null };
  const status = { loaded: false, step: 0, steps: 0, frames: 0, units: 0, error: null };
  window.w3Status.viewer = status;

  // Cells the side sees at a step: the replay's own fog, or the sight radius of its
  // units (types[type].sight, in cells) when the replay has none.
  function visibleCells(d, st) {
    const w = d.map.w, h = d.map.h;
    if (st.fog) return st.fog;
    const seen = new Uint8Array(w * h);
    for (const u of st.units) {
      if (u.owner !== d.side || u.hp <= 0) continue;
      const r = (d.types && d.types[u.type] ? d.types[u.type].sight : 6);
      const x0 = Math.max(0, Math.floor(u.x - r)), x1 = Math.min(w - 1, Math.ceil(u.x + r));
      const y0 = Math.max(0, Math.floor(u.y - r)), y1 = Math.min(h - 1, Math.ceil(u.y + r));
      for (let y = y0; y <= y1; y++) {
        for (let x = x0; x <= x1; x++) {
          const dx = x + 0.5 - u.x, dy = y + 0.5 - u.y;
          if (dx * dx + dy * dy <= r * r) seen[y * w + x] = 1;
        }
      }
    }
    return seen;
  }

  function draw(i) {
    const d = V.data;
    if (!d) return;
    i = Math.max(0, Math.min(d.steps.length - 1, i));
    V.step = i;
    const st = d.steps[i];
    const w = d.map.w, h = d.map.h;
    const cell = Math.max(4, Math.floor(480 / Math.max(w, h)));
    if (canvas.width !== w * cell) canvas.width = w * cell;
    if (canvas.height !== h * cell) canvas.height = h * cell;
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#e9e4d4";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    ctx.fillStyle = "#5b5346";
    for (let k = 0; k < w * h; k++) {
      if (d.map.cells[k]) ctx.fillRect((k % w) * cell, Math.floor(k / w) * cell, cell, cell);
    }
    const seen = visibleCells(d, st);
    ctx.fillStyle = "rgba(20, 20, 40, 0.35)";
    for (let k = 0; k < w * h; k++) {
      if (!seen[k]) ctx.fillRect((k % w) * cell, Math.floor(k / w) * cell, cell, cell);
    }
    const byId = new Map(st.units.map((u) => [u.id, u]));
    ctx.lineWidth = 1;
    ctx.setLineDash([3, 3]);
    for (const u of st.units) {  // where move orders walk to, dashed, under everything
      if (!u.dest || u.hp <= 0 || u.order !== 1) continue;
      ctx.strokeStyle = OWNER_COLORS[u.owner] || "#000";
      ctx.globalAlpha = 0.5;
      ctx.beginPath(); ctx.moveTo(u.x * cell, u.y * cell); ctx.lineTo(u.dest[0] * cell, u.dest[1] * cell); ctx.stroke();
    }
    ctx.setLineDash([]);
    ctx.globalAlpha = 1;
    for (const u of st.units) {  // targets, under the units
      const t = u.target >= 0 ? byId.get(u.target) : null;
      if (!t) continue;
      ctx.strokeStyle = OWNER_COLORS[u.owner] || "#000";
      ctx.beginPath(); ctx.moveTo(u.x * cell, u.y * cell); ctx.lineTo(t.x * cell, t.y * cell); ctx.stroke();
    }
    ctx.font = `${Math.max(8, cell)}px monospace`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    // Bases (type 0) first, as squares, so the units they train stay visible on top.
    const order = st.units.filter((u) => u.hp > 0).sort((a, b) => (a.type === 0 ? 0 : 1) - (b.type === 0 ? 0 : 1));
    for (const u of order) {
      const px = u.x * cell, py = u.y * cell;
      const r = u.type === 0 ? cell * 1.3 : cell * 0.6;
      ctx.fillStyle = OWNER_COLORS[u.owner] || "#000";
      ctx.globalAlpha = u.owner === d.side || seen[Math.floor(u.y) * w + Math.floor(u.x)] ? 1 : 0.35;
      ctx.beginPath();
      if (u.type === 0) ctx.rect(px - r, py - r, 2 * r, 2 * r); else ctx.arc(px, py, r, 0, 2 * Math.PI);
      ctx.fill();
      if (u.type !== 0) { ctx.fillStyle = "#fff"; ctx.fillText(TYPE_LETTERS[u.type] || "?", px, py + 1); }
      const hpMax = d.types && d.types[u.type] ? d.types[u.type].hp : 0;
      if (hpMax && (u.type === 0 || u.hp < hpMax)) {  // a bar under bases and wounded units
        ctx.fillStyle = "#2ecc71";
        ctx.fillRect(px - r, py + r + 1, 2 * r * Math.max(0, Math.min(1, u.hp / hpMax)), 2);
      }
      ctx.strokeStyle = u.order === 3 ? "#f1c40f" : "#000";  // retreat: a yellow ring; hold: a black one
      if (u.order === 3 || u.order === 2) { ctx.beginPath(); ctx.arc(px, py, r + 1.5, 0, 2 * Math.PI); ctx.stroke(); }
      ctx.globalAlpha = 1;
    }
    slider.value = String(i);
    label.textContent = `step ${st.step} / ${d.steps.length - 1} · ${st.units.length} units · ` +
      `${(d.owners || []).slice(0, 2).join(" vs ")}` + (d.meta && d.meta.winner >= 0 ? ` · winner ${d.meta.winner}` : "");
    status.step = i;
    status.units = st.units.length;
    status.frames++;
  }

  function stop() {
    if (V.timer) clearInterval(V.timer);
    V.timer = null;
    playBtn.textContent = "play";
  }

  function play() {
    if (!V.data) return;
    if (V.step >= V.data.steps.length - 1) draw(0);
    playBtn.textContent = "pause";
    V.timer = setInterval(() => {
      if (V.step >= V.data.steps.length - 1) { stop(); return; }
      draw(V.step + 1);
    }, PLAY_MS);
  }

  playBtn.addEventListener("click", () => (V.timer ? stop() : play()));
  document.getElementById("viewer-next").addEventListener("click", () => { stop(); draw(V.step + 1); });
  document.getElementById("viewer-prev").addEventListener("click", () => { stop(); draw(V.step - 1); });
  slider.addEventListener("input", () => { stop(); draw(Number(slider.value)); });

  async function load() {
    try {
      // Only when /status names a replay we have not shown: a run without evaluation
      // games yet asks nothing (and logs no 404).
      const st = window.w3Status.last;
      const path = st && st.episodes ? st.episodes.last_eval_replay : null;
      if (!path) { if (!V.data) label.textContent = "no evaluation replay yet"; return; }
      if (path === V.path) return;
      V.path = path;
      const r = await fetch("/replay/latest", { cache: "no-store" });
      const body = await r.json();
      if (!r.ok) { status.error = body.error; if (!V.data) label.textContent = body.error; return; }
      if (!body.steps || !body.steps.length) { status.error = "an empty replay"; return; }
      const playing = V.timer !== null;
      stop();
      V.data = body;
      slider.max = String(body.steps.length - 1);
      status.loaded = true;
      status.steps = body.steps.length;
      status.error = null;
      draw(0);
      document.getElementById("viewer-legend").textContent =
        "blue: " + (body.owners ? body.owners[0] : "side 0") + " · red: " + (body.owners ? body.owners[1] : "side 1") +
        " · grey: neutral · squares: bases · bars: hit points · m melee, r ranged, H heavy, c creep, X boss · shaded: outside side " +
        body.side + "'s sight · lines: targets · dashed: move orders · rings: hold (black), retreat (yellow)";
      if (playing) play();
    } catch (e) {
      status.error = String(e);
    }
  }

  window.w3Viewer = { load, draw, play, stop, state: V };
  load();
  setInterval(load, RELOAD_MS);
})();
