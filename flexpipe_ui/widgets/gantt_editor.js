// FlexPipe Gantt editor: the anywidget front end of flexpipe_ui.widgets.GanttEditor.
// Plain SVG, no dependencies (the machines are offline: nothing may come from a CDN).
// Python owns the state: it sends `data` (bars, memory curves, level-of-detail constants) and
// `highlight`/`selected`; this view draws them, lets the user drag a bar along its rank's row (live
// insertion marker while moving), and reports the drop as the `drop` trait; the kernel decides what
// the drop means. After drawing version v it sets `rendered = v`, and the time from a drop to the
// redraw it caused as `frontend_latency_ms`, so tests and benchmarks can see the browser side.
//
// At scale (flexpipe_ui.gantt_lod has the same rules, tested in Python): only the time window in
// view is drawn (wheel on the time axis or Ctrl+wheel zooms around the pointer, dragging the axis
// pans, double-click resets; + - 0 on the keyboard); bars narrower than `min_bar_px` merge into
// grey "occupied" bands; a label is drawn only inside a bar it fits in; past `max_lanes` ranks the
// lanes and the memory panels scroll (memory panels are drawn only when scrolled into view, as an
// envelope of one column per pixel, so the peak is never lost).

const NS = "http://www.w3.org/2000/svg";
const LOD = { min_bar_px: 3, band_gap_px: 2, font_px: 10, char_px: 6.2, label_pad_px: 4, max_lanes: 16 };

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
  // thousands separated, never scientific notation (memory in MiB reaches 1e5); by hand, not
  // toLocaleString, which costs ~10 µs a call (thousands of bars' hover texts per redraw)
  if (Math.abs(v) >= 100) return String(Math.round(v)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return Number(v.toPrecision(4)).toString();
}

function withUnit(v, unit) {
  return unit ? `${fmt(v)} ${unit}` : fmt(v);
}

function esc(v) {
  return String(v).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/"/g, "&quot;");
}

function tipText(d, i) {
  // hover: action, stage, microbatch, start, end, duration, memory (with units)
  const b = d.bars, tu = (d.units && d.units.time) || "", mu = (d.units && d.units.memory) || "";
  return `${b.name[i]} (stage ${b.stage[i]}, mb ${b.label[i]})\n` +
    `start ${withUnit(b.start[i], tu)} · end ${withUnit(b.end[i], tu)} · dur ${withUnit(b.end[i] - b.start[i], tu)}` +
    (b.mem ? `\nmemory ${withUnit(b.mem[i], mu)}` : "");
}

function firstEndingAfter(ends, order, t) {
  // order: bar indices of one lane sorted by start (so also by end: a lane runs one at a time)
  let lo = 0, hi = order.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ends[order[mid]] <= t) lo = mid + 1; else hi = mid;
  }
  return lo;
}

function view8(x) {
  // a binary buffer as it arrives (DataView from the widget's comm, or an ArrayBuffer / typed array)
  if (x instanceof ArrayBuffer) return new Uint8Array(x);
  return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
}

function typed(x, Type) {
  // copy into an aligned buffer of the column's type (the message's buffers need not be aligned)
  const u8 = view8(x);
  const out = new Type(u8.byteLength / Type.BYTES_PER_ELEMENT);
  new Uint8Array(out.buffer).set(u8);
  return out;
}

function unpack(d) {
  // GanttEditor.data on the wire (flexpipe_ui.widgets.gantt_editor.data_to_wire) -> plain columns;
  // data that came as plain lists (tests, a fake model) is used as it is
  const b = d.bars;
  if (!b || !b.packed) return d;
  const bars = { name: b.n ? b.name.split("\n") : [], label: b.n ? b.label.split("\n") : [] };
  const types = { rank: Int32Array, start: Float64Array, end: Float64Array, stage: Int32Array,
                  index: Int32Array, side: Uint8Array, mem: Float64Array };
  for (const k in types) if (b[k] != null) bars[k] = typed(b[k], types[k]);
  const ci = typed(b.color, Uint16Array);
  bars.color = Array.from(ci, (k) => b.palette[k]);
  const memory = (d.memory || []).map((c) => ({ t: typed(c.t, Float64Array), v: typed(c.v, Float64Array) }));
  return Object.assign({}, d, { bars, memory });
}

function prepare(raw) {
  // per data version: the columns, bars of each lane (rank, stream) sorted by start, each rank's centres
  const d = unpack(raw);
  const bars = d.bars || { name: [] };
  const n = bars.name.length, R = d.ranks || 0;
  const lanes = Array.from({ length: 2 * R }, () => []);
  for (let i = 0; i < n; i++) lanes[2 * bars.rank[i] + (bars.side ? bars.side[i] : 0)].push(i);
  for (const ln of lanes) ln.sort((a, b) => bars.start[a] - bars.start[b]);
  const byRank = Array.from({ length: R }, () => []);
  for (let i = 0; i < n; i++) byRank[bars.rank[i]].push({ name: bars.name[i], c: (bars.start[i] + bars.end[i]) / 2 });
  for (const row of byRank) row.sort((a, b) => a.c - b.c);
  // memory scale: from just under the lowest value (static memory often dominates) to the top
  const lim = d.memory_limit;
  let top = lim || 0, low = Infinity;
  const peaks = (d.memory || []).map((c) => {
    let pk = -Infinity;
    for (const v of c.v) { if (v > pk) pk = v; if (v < low) low = v; }
    if (pk > top) top = pk;
    return pk;
  });
  if (lim != null) low = Math.min(low, lim);
  const span = Math.max(top - low, 1e-9);
  return { d, lanes, byRank, n, R, peaks, memLow: Math.max(0, low - 0.15 * span), memTop: top + 0.1 * span };
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "fp-editor";
  root.tabIndex = 0;
  root.setAttribute("role", "application");
  root.setAttribute("aria-label", "pipeline schedule editor: click a bar to select, drag along its row or use " +
    "the arrow keys to move it; wheel on the time axis to zoom, drag the axis to pan, double-click it to reset");
  el.appendChild(root);
  const laneBox = document.createElement("div");
  laneBox.className = "fp-lanes-box";
  root.appendChild(laneBox);
  const svg = mk("svg", { class: "fp-svg" }, laneBox);
  const axisSvg = mk("svg", { class: "fp-axis-svg" }, root);
  const memBox = document.createElement("div");
  memBox.className = "fp-mem-box";
  root.appendChild(memBox);
  const memSvg = mk("svg", { class: "fp-mem-svg" }, memBox);
  let prep = null, prepVersion = null, prepData = null;
  let view = null;      // [t0, t1] in view; null: the whole makespan
  let geom = null;      // layout of the last draw, for hit-testing drags
  let drag = null, pan = null;
  let dropAt = null;    // performance.now() of the last drop, until the redraw it causes
  let dropVersion = 0;  // the data version on screen at that drop

  function layout() {
    const raw = model.get("data") || {};
    if (prepData !== raw || prepVersion !== raw.version) { prep = prepare(raw); prepVersion = raw.version; prepData = raw; }
    const d = prep.d;
    const lod = Object.assign({}, LOD, d.lod || {});
    const R = d.ranks || 0;
    const T = Math.max(d.makespan || 0, 1e-9);
    const W = Math.max(320, root.clientWidth || model.get("width") || 900);
    const left = 62, right = 14, top = 6;
    const laneH = R > 12 ? 18 : 26;
    const memH = d.memory && d.memory.length ? (R > 8 ? 26 : 36) : 0;
    let t0 = 0, t1 = T;
    if (view) { t0 = Math.max(0, view[0]); t1 = Math.min(T, view[1]); if (!(t1 > t0)) { t0 = 0; t1 = T; view = null; } }
    const plotW = W - left - right;
    const k = plotW / (t1 - t0);
    // read before the draw changes the DOM: reading it after would force a layout of everything drawn
    const memScroll = memBox.scrollTop;
    return { d, lod, R, T, W, left, right, top, laneH, memH, t0, t1, plotW, k, memScroll,
             sx: (t) => left + (t - t0) * k, timeAt: (px) => t0 + (px - left) / k };
  }

  function draw() {
    const tStart = performance.now();
    const L = layout();
    const { d, lod, R, T, W, left, top, laneH, t0, t1, plotW, sx } = L;
    const bars = d.bars || { name: [] };
    const hl = new Set(model.get("highlight") || []);
    const sel = model.get("selected") || "";
    const tu = (d.units && d.units.time) || "", mu = (d.units && d.units.memory) || "";
    const H = top + R * laneH + 4;
    laneBox.style.maxHeight = R > lod.max_lanes ? `${lod.max_lanes * laneH + top + 4}px` : "";
    laneBox.style.overflowY = R > lod.max_lanes ? "auto" : "visible";
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    svg.setAttribute("data-version", String(d.version || 0));
    svg.setAttribute("data-window", `${t0},${t1}`);
    svg.replaceChildren();
    const lanes = mk("g", { class: "fp-lanes" }, svg);
    for (let r = 0; r < R; r++) {
      mk("rect", { x: left, y: top + r * laneH, width: plotW, height: laneH, fill: r % 2 ? "#fafafa" : "#f3f3f3" }, lanes);
      const lab = mk("text", { x: left - 6, y: top + r * laneH + laneH / 2 + 4, "text-anchor": "end", class: "fp-rank" }, lanes);
      lab.textContent = `rank ${r}`;
    }
    // grid lines of the axis's ticks
    const step = niceStep(t1 - t0, Math.max(2, Math.floor(plotW / 90)));
    const grid = mk("g", { class: "fp-grid" }, svg);
    for (let t = Math.ceil(t0 / step) * step; t <= t1 + 1e-9; t += step)
      mk("line", { x1: sx(t), x2: sx(t), y1: top, y2: top + R * laneH, stroke: "#e2e2e2" }, grid);
    // bars: only those in view; thin ones merge into bands; labels only where they fit
    // one markup string for the whole layer (parsing it is several times faster than building
    // thousands of elements one attribute at a time)
    const g = mk("g", { class: "fp-bars" }, svg);
    const html = [];
    // hover texts made up front for a few thousand bars, else when the pointer first enters one
    const eagerTips = (bars.name.length * (t1 - t0)) / T <= 2000;
    const r1 = (v) => Math.round(v * 100) / 100;
    let nBars = 0, nBands = 0, nLabels = 0;
    for (let ln = 0; ln < prep.lanes.length; ln++) {
      const order = prep.lanes[ln];
      if (!order.length) continue;
      const r = ln >> 1, side = ln & 1;
      const y = top + r * laneH + (side ? laneH - 9 : 3);
      const h = side ? 7 : laneH - 6;
      let band = null;
      const flush = () => {
        if (!band) return;
        const x = sx(band.s), w = Math.max(1, sx(band.e) - x);
        html.push(`<rect x="${r1(x)}" y="${y}" width="${r1(w)}" height="${h}" class="fp-band" data-count="${band.n}">` +
          `<title>${band.n} action${band.n > 1 ? "s" : ""} (zoom in to see them: wheel on the time axis)\n` +
          `from ${withUnit(band.s, tu)} to ${withUnit(band.e, tu)}</title></rect>`);
        nBands++;
        band = null;
      };
      for (let j = firstEndingAfter(bars.end, order, t0); j < order.length; j++) {
        const i = order[j];
        const s = bars.start[i], e = bars.end[i];
        if (s >= t1 && !(s === e && s === t1)) break;
        const cs = Math.max(s, t0), ce = Math.min(e, t1);
        const px = (ce - cs) * L.k;
        if (px < lod.min_bar_px) {
          if (band && (cs - band.e) * L.k < lod.band_gap_px) { band.e = Math.max(band.e, ce); band.n++; }
          else { flush(); band = { s: cs, e: ce, n: 1 }; }
          continue;
        }
        flush();
        const name = esc(bars.name[i]);
        const x = sx(cs), w = sx(ce) - x;
        const cls = "fp-bar" + (hl.has(bars.name[i]) ? " fp-bad" : "") + (bars.name[i] === sel ? " fp-sel" : "");
        html.push(`<rect x="${r1(x)}" y="${y}" width="${r1(w)}" height="${h}" fill="${esc(bars.color[i])}" class="${cls}" ` +
          `data-name="${name}" data-rank="${r}" data-index="${bars.index[i]}" data-i="${i}">` +
          (eagerTips ? `<title>${esc(tipText(d, i))}</title>` : "") + "</rect>");
        nBars++;
        const text = String(bars.label[i]);
        if (!side && w >= text.length * lod.char_px + lod.label_pad_px) {
          html.push(`<text x="${r1(x + w / 2)}" y="${y + h / 2 + 3.5}" text-anchor="middle" class="fp-label">${esc(text)}</text>`);
          nLabels++;
        }
      }
      flush();
    }
    g.innerHTML = html.join("");
    svg.setAttribute("data-shapes", `${nBars},${nBands},${nLabels}`);
    const marker = mk("line", { class: "fp-marker", y1: 0, y2: 0, x1: 0, x2: 0, visibility: "hidden" }, svg);
    geom = { left, top, laneH, plotW, sx, timeAt: L.timeAt, byRank: prep.byRank, R, marker };
    drawAxis(L, tu, step);
    drawMemory(L, mu);
    const v = d.version || 0;
    const ms = performance.now() - tStart;
    svg.setAttribute("data-render-ms", ms.toFixed(1));
    if (dropAt !== null && v > dropVersion) {
      const lat = performance.now() - dropAt;
      model.set("frontend_latency_ms", lat);
      svg.setAttribute("data-latency-ms", lat.toFixed(1));
      dropAt = null;
    }
    if (model.get("rendered") !== v) {
      model.set("rendered", v);
      model.save_changes();
    }
  }

  function drawAxis(L, tu, step) {
    const { W, left, plotW, t0, t1, sx, T } = L;
    axisSvg.setAttribute("width", W);
    axisSvg.setAttribute("height", 32);
    axisSvg.replaceChildren();
    const ax = mk("g", { class: "fp-axis" }, axisSvg);
    mk("rect", { x: left, y: 0, width: plotW, height: 20, class: "fp-axis-strip" }, ax);
    for (let t = Math.ceil(t0 / step) * step; t <= t1 + 1e-9; t += step) {
      mk("line", { x1: sx(t), x2: sx(t), y1: 0, y2: 4, stroke: "#999" }, ax);
      const tx = mk("text", { x: sx(t), y: 15, "text-anchor": "middle" }, ax);
      tx.textContent = fmt(t);
    }
    const zoomed = t0 > 0 || t1 < T;
    const title = mk("text", { x: left + plotW, y: 29, "text-anchor": "end", class: "fp-axis-title" }, ax);
    title.textContent = tu ? `time (${tu})` : "time (unit costs)";
    const hint = mk("text", { x: left, y: 29, class: "fp-axis-hint" }, ax);
    hint.textContent = zoomed ? `${withUnit(t0, tu)} – ${withUnit(t1, tu)} of ${withUnit(T, tu)} (double-click the axis: all)`
                              : "wheel on the axis: zoom · drag it: pan";
  }

  function drawMemory(L, mu) {
    const { d, lod, R, W, left, plotW, memH, t0, t1, sx } = L;
    memSvg.replaceChildren();
    if (!memH) { memSvg.setAttribute("width", 0); memSvg.setAttribute("height", 0); memBox.style.maxHeight = ""; return; }
    const shown = Math.min(R, Math.max(1, lod.max_lanes >> 1));
    memBox.style.maxHeight = R > shown ? `${shown * memH + 6}px` : "";
    memBox.style.overflowY = R > shown ? "auto" : "visible";
    memSvg.setAttribute("width", W);
    memSvg.setAttribute("height", R * memH + 6);
    const mg = mk("g", { class: "fp-mem" }, memSvg);
    const lim = d.memory_limit;
    const low = prep.memLow, peak = prep.memTop;
    // only the panels scrolled into view (plus one either side)
    const first = Math.max(0, Math.floor(L.memScroll / memH) - 1);
    const last = Math.min(R, first + shown + 3);
    const cols = Math.max(1, Math.floor(plotW));
    for (let r = first; r < last; r++) {
      const y0 = r * memH + 2, y1 = y0 + memH - 4;
      const sy = (v) => y1 - ((y1 - y0) * (v - low)) / (peak - low);
      mk("rect", { x: left, y: y0, width: plotW, height: memH - 4, fill: "#fff", stroke: "#eee" }, mg);
      const c = d.memory[r];
      const pk = prep.peaks[r];
      // coordinates to 0.1 px: shorter strings, faster to build and to parse
      const rx = (t) => Math.round(sx(t) * 10) / 10, ry = (v) => Math.round(sy(v) * 10) / 10;
      mk("polyline", { points: envelopePoints(c.t, c.v, t0, t1, cols, rx, ry), fill: "none",
                       stroke: lim != null && pk > lim + 1e-9 ? "#d62728" : "#555", "stroke-width": 1.2 }, mg);
      if (lim != null) mk("line", { x1: left, x2: left + plotW, y1: sy(lim), y2: sy(lim), class: "fp-cap" }, mg);
      const lab = mk("text", { x: left - 6, y: y0 + memH / 2, "text-anchor": "end", class: "fp-memlab" }, mg);
      lab.textContent = `mem r${r}`;
      const pt = mk("text", { x: left + plotW - 2, y: y0 + 9, "text-anchor": "end", class: "fp-memlab" }, mg);
      pt.textContent = `peak ${withUnit(pk, mu)}`;
    }
  }

  function envelopePoints(ts, vs, t0, t1, cols, sx, sy) {
    // the step curve in [t0, t1], one column per pixel: its lowest and highest value in each
    // (flexpipe_ui.gantt_lod.envelope); short curves are drawn exactly
    let a = 0, hi = ts.length - 1;
    while (a < hi) { const mid = (a + hi + 1) >> 1; if (ts[mid] <= t0) a = mid; else hi = mid - 1; }
    let b = a;
    while (b < ts.length && ts[b] < t1) b++;
    if (b - a <= 2 * cols) {
      let pts = `${sx(t0)},${sy(vs[a])} `;
      for (let k = a + 1; k < b; k++) pts += `${sx(ts[k])},${sy(vs[k - 1])} ${sx(ts[k])},${sy(vs[k])} `;
      return pts + `${sx(t1)},${sy(vs[Math.max(a, b - 1)])}`;
    }
    let pts = "", k = a;
    for (let c = 0; c < cols; c++) {
      const ce = t0 + ((t1 - t0) * (c + 1)) / cols;
      let lo = vs[k], hi = vs[k];
      while (k + 1 < ts.length && ts[k + 1] < ce) { k++; if (vs[k] < lo) lo = vs[k]; if (vs[k] > hi) hi = vs[k]; }
      const x = sx(t0 + ((t1 - t0) * c) / cols);
      pts += `${x},${sy(lo)} ${x},${sy(hi)} `;
    }
    return pts + `${sx(t1)},${sy(vs[k])}`;
  }

  // ---- zoom and pan (time axis), re-rendering only what is in view
  function zoom(factor, atPx) {
    const L = layout();
    const at = Math.min(Math.max(L.timeAt(atPx), L.t0), L.t1);
    let span = Math.min(L.T, Math.max((L.t1 - L.t0) * factor, L.T * 1e-6));
    let a = at - (at - L.t0) * (span / (L.t1 - L.t0));
    a = Math.min(Math.max(0, a), L.T - span);
    view = span >= L.T * (1 - 1e-9) ? null : [a, a + span];
    draw();
  }
  function panBy(dtime) {
    const L = layout();
    if (!view) return;
    const span = L.t1 - L.t0;
    const a = Math.min(Math.max(0, L.t0 + dtime), L.T - span);
    view = [a, a + span];
    draw();
  }
  function onWheel(ev, onAxis) {
    if (!onAxis && !ev.ctrlKey) return;  // plain wheel over the lanes scrolls them
    ev.preventDefault();
    const box = axisSvg.getBoundingClientRect();
    zoom(Math.pow(1.25, Math.sign(ev.deltaY) || 0), ev.clientX - box.left);
  }
  axisSvg.addEventListener("wheel", (ev) => onWheel(ev, true), { passive: false });
  svg.addEventListener("wheel", (ev) => onWheel(ev, false), { passive: false });
  axisSvg.addEventListener("pointerdown", (ev) => {
    pan = { x: ev.clientX, k: layout().k };
    axisSvg.setPointerCapture(ev.pointerId);
    ev.preventDefault();
  });
  axisSvg.addEventListener("pointermove", (ev) => {
    if (!pan) return;
    const dx = ev.clientX - pan.x;
    if (Math.abs(dx) < 2) return;
    pan.x = ev.clientX;
    panBy(-dx / pan.k);
  });
  const endPan = (ev) => { if (pan) { pan = null; try { axisSvg.releasePointerCapture(ev.pointerId); } catch (e) { /* released */ } } };
  axisSvg.addEventListener("pointerup", endPan);
  axisSvg.addEventListener("pointercancel", endPan);
  axisSvg.addEventListener("dblclick", () => { view = null; draw(); });
  let memPending = false;
  memBox.addEventListener("scroll", () => {
    if (memPending) return;
    memPending = true;
    requestAnimationFrame(() => { memPending = false; const L = layout(); drawMemory(L, (L.d.units && L.d.units.memory) || ""); });
  });

  svg.addEventListener("pointerover", (ev) => {
    const t = ev.target;
    if (t instanceof SVGRectElement && t.classList.contains("fp-bar") && !t.firstChild)
      mk("title", {}, t).textContent = tipText(prep.d, Number(t.dataset.i));
  });

  // ---- drag and drop of a bar along its rank (works at any zoom: times come from the view)
  svg.addEventListener("pointerdown", (ev) => {
    const t = ev.target;
    if (!(t instanceof SVGRectElement) || !t.classList.contains("fp-bar")) return;
    const box = svg.getBoundingClientRect();
    drag = { el: t, name: t.dataset.name, rank: Number(t.dataset.rank), x0: ev.clientX, y0: ev.clientY,
             cx: Number(t.getAttribute("x")) + Number(t.getAttribute("width")) / 2, box, moved: false };
    svg.setPointerCapture(ev.pointerId);
    ev.preventDefault();
    root.focus({ preventScroll: true });
  });

  svg.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x0, dy = ev.clientY - drag.y0;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    drag.moved = true;
    drag.el.setAttribute("transform", `translate(${dx},${dy})`);
    drag.el.classList.add("fp-dragging");
    // live feedback: where it would land among the other actions of its rank
    const t = geom.timeAt(drag.cx + dx);
    const row = geom.byRank[drag.rank].filter((b) => b.name !== drag.name);
    let k = 0;
    while (k < row.length && row[k].c < t) k++;
    const xa = k > 0 ? geom.sx(row[k - 1].c) : geom.left;
    const xb = k < row.length ? geom.sx(row[k].c) : geom.left + geom.plotW;
    const xm = Math.min(Math.max((xa + xb) / 2, geom.left), geom.left + geom.plotW);
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
    model.set("drop", { name: dr.name, rank, time: geom.timeAt(dr.cx + dx), seq: Date.now() + Math.random() });
    model.save_changes();
  }
  svg.addEventListener("pointerup", (ev) => endDrag(ev, false));
  svg.addEventListener("pointercancel", (ev) => endDrag(ev, true));

  root.addEventListener("keydown", (ev) => {
    const zoomKeys = { "+": 0.5, "=": 0.5, "-": 2 };
    if (ev.key in zoomKeys) { ev.preventDefault(); const L = layout(); zoom(zoomKeys[ev.key], L.left + L.plotW / 2); return; }
    if (ev.key === "0") { ev.preventDefault(); view = null; draw(); return; }
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
