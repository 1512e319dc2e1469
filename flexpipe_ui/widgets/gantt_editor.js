// FlexPipe Gantt editor: the anywidget front end of flexpipe_ui.widgets.GanttEditor.
// Plain SVG, no dependencies (the machines are offline: nothing may come from a CDN).
// Python owns the state: it sends `data` (bars, memory curves) and `highlight`/`selected`;
// this view draws them, lets the user drag a bar along its rank's row (live insertion marker while
// moving), and reports the drop as the `drop` trait; the kernel decides what the drop means.
// After drawing version v it sets `rendered = v`, and the time from a drop to the redraw it caused
// as `frontend_latency_ms`, so tests and benchmarks can see the browser side.

const NS = "http://www.w3.org/2000/svg";

function mk(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}

function niceStep(span, n) {
  const raw = span / Math.max(1, n);
  const p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function fmt(v) {
  // thousands separated, never scientific notation (memory in MiB reaches 1e5)
  if (Math.abs(v) >= 100) return Math.round(v).toLocaleString("en-US");
  return Number(v.toPrecision(4)).toString();
}

function withUnit(v, unit) {
  return unit ? `${fmt(v)} ${unit}` : fmt(v);
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "fp-editor";
  root.tabIndex = 0;
  root.setAttribute("role", "application");
  root.setAttribute("aria-label", "pipeline schedule editor: click a bar to select, drag along its row or use the arrow keys to move it");
  el.appendChild(root);
  const svg = mk("svg", { class: "fp-svg" }, root);
  let geom = null;      // layout of the last draw, for hit-testing drags
  let drag = null;
  let dropAt = null;    // performance.now() of the last drop, until the redraw it causes
  let dropVersion = 0;  // the data version on screen at that drop

  function draw() {
    const d = model.get("data") || {};
    const bars = d.bars || { name: [] };
    const n = bars.name.length;
    const R = d.ranks || 0;
    const hl = new Set(model.get("highlight") || []);
    const sel = model.get("selected") || "";
    const W = Math.max(320, root.clientWidth || model.get("width") || 900);
    const left = 62, right = 14, top = 6;
    const laneH = R > 12 ? 18 : 26;
    const memH = d.memory && d.memory.length ? (R > 8 ? 26 : 36) : 0;
    const T = Math.max(d.makespan || 0, 1e-9);
    const tu = (d.units && d.units.time) || "", mu = (d.units && d.units.memory) || "";
    const plotW = W - left - right;
    const sx = (t) => left + (plotW * t) / T;
    const ganttBottom = top + R * laneH;
    const axisY = ganttBottom + 16;
    const memTop = axisY + 22;
    const H = memTop + R * memH + (memH ? 6 : 0);
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    svg.setAttribute("data-version", String(d.version || 0));
    svg.replaceChildren();

    const lanes = mk("g", { class: "fp-lanes" }, svg);
    for (let r = 0; r < R; r++) {
      mk("rect", { x: left, y: top + r * laneH, width: plotW, height: laneH,
                   fill: r % 2 ? "#fafafa" : "#f3f3f3" }, lanes);
      const lab = mk("text", { x: left - 6, y: top + r * laneH + laneH / 2 + 4, "text-anchor": "end",
                               class: "fp-rank" }, lanes);
      lab.textContent = `rank ${r}`;
    }
    // time axis
    const step = niceStep(T, Math.max(2, Math.floor(plotW / 90)));
    const ax = mk("g", { class: "fp-axis" }, svg);
    for (let t = 0; t <= T + 1e-9; t += step) {
      mk("line", { x1: sx(t), x2: sx(t), y1: top, y2: ganttBottom, stroke: "#e2e2e2" }, ax);
      const tx = mk("text", { x: sx(t), y: axisY, "text-anchor": "middle" }, ax);
      tx.textContent = fmt(t);
    }
    const axTitle = mk("text", { x: left + plotW, y: axisY + 13, "text-anchor": "end", class: "fp-axis-title" }, ax);
    axTitle.textContent = tu ? `time (${tu})` : "time (unit costs)";
    // bars
    const g = mk("g", { class: "fp-bars" }, svg);
    const byRank = Array.from({ length: R }, () => []);
    for (let i = 0; i < n; i++) {
      const r = bars.rank[i], s = bars.start[i], e = bars.end[i];
      const side = bars.side ? bars.side[i] : 0;
      const x = sx(s), w = Math.max(1, sx(e) - sx(s));
      const y = top + r * laneH + (side ? laneH - 9 : 3);
      const h = side ? 7 : laneH - 6;
      const name = bars.name[i];
      const cls = "fp-bar" + (hl.has(name) ? " fp-bad" : "") + (name === sel ? " fp-sel" : "");
      const rect = mk("rect", { x, y, width: w, height: h, fill: bars.color[i], class: cls,
                                "data-name": name, "data-rank": r, "data-index": bars.index[i] }, g);
      const tip = mk("title", {}, rect);
      tip.textContent = `${name} (stage ${bars.stage[i]}, mb ${bars.label[i]})\n` +
        `start ${withUnit(s, tu)} · end ${withUnit(e, tu)} · dur ${withUnit(e - s, tu)}` +
        (bars.mem ? `\nmemory ${withUnit(bars.mem[i], mu)}` : "");
      if (w >= 9 && n <= 4000 && !side) {
        const lb = mk("text", { x: x + w / 2, y: y + h / 2 + 3.5, "text-anchor": "middle", class: "fp-label" }, g);
        lb.textContent = bars.label[i];
      }
      byRank[r].push({ name, c: (s + e) / 2 });
    }
    // memory panels, one per rank, with the cap
    if (memH) {
      const mg = mk("g", { class: "fp-mem" }, svg);
      const lim = d.memory_limit;
      // scale from just under the lowest value (static memory often dominates) to the top
      let peak = lim || 0, low = Infinity;
      for (const c of d.memory) for (const v of c.v) { peak = Math.max(peak, v); low = Math.min(low, v); }
      if (lim != null) low = Math.min(low, lim);
      const span = Math.max(peak - low, 1e-9);
      low = Math.max(0, low - 0.15 * span);
      peak = peak + 0.1 * span;
      for (let r = 0; r < R; r++) {
        const y0 = memTop + r * memH, y1 = y0 + memH - 4;
        const sy = (v) => y1 - ((y1 - y0) * (v - low)) / (peak - low);
        mk("rect", { x: left, y: y0, width: plotW, height: memH - 4, fill: "#fff", stroke: "#eee" }, mg);
        const c = d.memory[r];
        let pts = "";
        for (let k = 0; k < c.t.length; k++) {
          if (k) pts += `${sx(c.t[k])},${sy(c.v[k - 1])} `;
          pts += `${sx(c.t[k])},${sy(c.v[k])} `;
        }
        pts += `${sx(T)},${sy(c.v[c.v.length - 1])}`;
        const over = lim != null && Math.max(...c.v) > lim + 1e-9;
        mk("polyline", { points: pts, fill: "none", stroke: over ? "#d62728" : "#555", "stroke-width": 1.2 }, mg);
        if (lim != null) mk("line", { x1: left, x2: left + plotW, y1: sy(lim), y2: sy(lim), class: "fp-cap" }, mg);
        const lab = mk("text", { x: left - 6, y: y0 + memH / 2 + 2, "text-anchor": "end", class: "fp-memlab" }, mg);
        lab.textContent = `mem r${r}`;
        const pk = mk("text", { x: left + plotW - 2, y: y0 + 9, "text-anchor": "end", class: "fp-memlab" }, mg);
        pk.textContent = `peak ${withUnit(Math.max(...c.v), mu)}`;
      }
    }
    for (const row of byRank) row.sort((a, b) => a.c - b.c);
    geom = { left, top, laneH, T, plotW, sx, byRank, R };
    const marker = mk("line", { class: "fp-marker", y1: 0, y2: 0, x1: 0, x2: 0, visibility: "hidden" }, svg);
    geom.marker = marker;
    const v = d.version || 0;
    if (dropAt !== null && v > dropVersion) {
      const ms = performance.now() - dropAt;
      model.set("frontend_latency_ms", ms);
      svg.setAttribute("data-latency-ms", ms.toFixed(1));
      dropAt = null;
    }
    model.set("rendered", v);
    model.save_changes();
  }

  function timeAt(px) {
    return ((px - geom.left) / geom.plotW) * geom.T;
  }

  svg.addEventListener("pointerdown", (ev) => {
    const t = ev.target;
    if (!(t instanceof SVGRectElement) || !t.classList.contains("fp-bar")) return;
    const box = svg.getBoundingClientRect();
    drag = { el: t, name: t.dataset.name, rank: Number(t.dataset.rank), x0: ev.clientX, y0: ev.clientY,
             cx: Number(t.getAttribute("x")) + Number(t.getAttribute("width")) / 2, box, moved: false };
    svg.setPointerCapture(ev.pointerId);
    ev.preventDefault();
    root.focus();
  });

  svg.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x0, dy = ev.clientY - drag.y0;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    drag.moved = true;
    drag.el.setAttribute("transform", `translate(${dx},${dy})`);
    drag.el.classList.add("fp-dragging");
    // live feedback: where it would land among the other actions of its rank
    const t = timeAt(drag.cx + dx);
    const row = geom.byRank[drag.rank].filter((b) => b.name !== drag.name);
    let k = 0;
    while (k < row.length && row[k].c < t) k++;
    const xa = k > 0 ? geom.sx(row[k - 1].c) : geom.left;
    const xb = k < row.length ? geom.sx(row[k].c) : geom.left + geom.plotW;
    const xm = (xa + xb) / 2;
    const y = geom.top + drag.rank * geom.laneH;
    const m = geom.marker;
    m.setAttribute("x1", xm); m.setAttribute("x2", xm);
    m.setAttribute("y1", y); m.setAttribute("y2", y + geom.laneH);
    m.setAttribute("visibility", "visible");
  });

  function endDrag(ev, cancelled) {
    if (!drag) return;
    const dr = drag;
    drag = null;
    try { svg.releasePointerCapture(ev.pointerId); } catch (e) { /* already released */ }
    geom.marker.setAttribute("visibility", "hidden");
    if (cancelled) { dr.el.removeAttribute("transform"); return; }
    if (!dr.moved) {
      model.set("selected", dr.name);
      model.save_changes();
      return;
    }
    const dx = ev.clientX - dr.x0;
    const y = ev.clientY - dr.box.top;
    const rank = Math.floor((y - geom.top) / geom.laneH);
    dropAt = performance.now();
    dropVersion = (model.get("data") || {}).version || 0;
    model.set("selected", dr.name);
    model.set("drop", { name: dr.name, rank, time: timeAt(dr.cx + dx), seq: Date.now() + Math.random() });
    model.save_changes();
  }
  svg.addEventListener("pointerup", (ev) => endDrag(ev, false));
  svg.addEventListener("pointercancel", (ev) => endDrag(ev, true));

  root.addEventListener("keydown", (ev) => {
    const keys = { ArrowLeft: "earlier", ArrowRight: "later", s: "swap", z: "undo", y: "redo" };
    const cmd = keys[ev.key];
    if (!cmd) return;
    ev.preventDefault();
    model.set("command", { cmd, seq: Date.now() + Math.random() });
    model.save_changes();
  });

  model.on("change:data", draw);
  model.on("change:highlight", draw);
  model.on("change:selected", draw);
  let lastW = 0;
  const ro = new ResizeObserver(() => {
    const w = root.clientWidth;
    if (w && Math.abs(w - lastW) > 2) { lastW = w; draw(); }
  });
  ro.observe(root);
  draw();
  return () => { ro.disconnect(); };
}

export default { render };
