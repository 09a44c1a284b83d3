/* layerscope HTML report. Builds the page from the JSON in #ls-data.
   Every string of the profile reaches the DOM through textContent or an attribute set
   from script, never as markup. Only expanded rows are in the DOM. */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("ls-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";  // a namespace name, never fetched
  var N = D.depth.length;

  // ---- number formats (layerscope.render.units) ----------------------------------
  function strip(s) {
    return s.indexOf(".") < 0 ? s : s.replace(/0+$/, "").replace(/\.$/, "");
  }
  function g(x, p) {  // Python's format(x, ".<p>g")
    if (x === 0) return "0";
    if (!isFinite(x)) return x > 0 ? "inf" : x < 0 ? "-inf" : "nan";
    var ex = x.toExponential(p - 1), e = parseInt(ex.split("e")[1], 10);
    if (e < -4 || e >= p) {
      var parts = ex.split("e"), d = parts[1].slice(1);
      return strip(parts[0]) + "e" + parts[1][0] + (d.length < 2 ? "0" + d : d);
    }
    return strip(x.toFixed(Math.max(0, p - 1 - e)));
  }
  function group(s) { return s.replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  function count(n) {
    if (Number.isInteger(n)) return (n < 0 ? "-" : "") + group(String(Math.abs(n)));
    var s = Math.abs(n).toFixed(2).split(".");
    return (n < 0 ? "-" : "") + group(s[0]) + "." + s[1];
  }
  var SI = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "K"]];
  var BIN = [[Math.pow(2, 40), "TiB"], [Math.pow(2, 30), "GiB"], [Math.pow(2, 20), "MiB"], [1024, "KiB"]];
  var SEC = [[60, "min"], [1, "s"], [1e-3, "ms"], [1e-6, "\u00b5s"]];
  function si(n) {
    for (var k = 0; k < SI.length; k++) if (Math.abs(n) >= SI[k][0]) return g(n / SI[k][0], 3) + " " + SI[k][1];
    return g(n, 6);
  }
  function nbytes(n) {
    for (var k = 0; k < BIN.length; k++) if (Math.abs(n) >= BIN[k][0]) return (n / BIN[k][0]).toFixed(2) + " " + BIN[k][1];
    return Math.trunc(n) + " B";
  }
  function seconds(t) {
    for (var k = 0; k < SEC.length; k++) if (Math.abs(t) >= SEC[k][0]) return g(t / SEC[k][0], 3) + " " + SEC[k][1];
    return g(t / 1e-9, 3) + " ns";
  }
  function pct(p) {
    if (p === 0) return "0%";
    if (Math.abs(p - 100) < 0.05) return "100%";
    if (Math.abs(p) >= 0.1) return p.toFixed(1) + "%";
    return g(p, 2) + "%";
  }
  var FORMATS = {
    count: count, si: si, bytes: nbytes, seconds: seconds, rate: si, pct: pct,
    number: function (x) { return g(x, 3); }, text: String
  };
  function fmt(x, kind) {
    if (x === null || x === undefined) return "";
    if (typeof x === "number" && !isFinite(x)) return g(x, 3);
    return (FORMATS[kind] || String)(x);
  }
  window.lsFormat = fmt;  // for tests: the same formats as the console

  // ---- the tree ------------------------------------------------------------------
  var parent = new Int32Array(N), kids = new Array(N), path = new Array(N), nid = new Array(N);
  var depth = D.depth, names = D.name, types = D.types, typ = D.type;
  (function () {
    var stack = [];
    for (var i = 0; i < N; i++) {
      var d = depth[i], p = d ? stack[d - 1] : -1;
      stack[d] = i;
      parent[i] = p;
      if (p < 0) { path[i] = ""; nid[i] = "0"; }
      else {
        var ks = kids[p] || (kids[p] = []);
        ks.push(i);
        path[i] = path[p] ? path[p] + "." + names[i] : names[i];
        nid[i] = nid[p] === "0" ? String(ks.length) : nid[p] + "." + ks.length;
      }
      if (D.path[i] !== undefined) path[i] = D.path[i];
      if (D.id[i] !== undefined) nid[i] = D.id[i];
    }
  })();
  var V = D.v, S = {}, innerPos = new Int32Array(N).fill(-1);
  D.inner.forEach(function (i, k) { innerPos[i] = k; });
  Object.keys(V).forEach(function (key) {  // non-finite values travel as strings
    var a = V[key];
    if (key === "input_shape" || key === "output_shape") return;
    for (var i = 0; i < a.length; i++) if (typeof a[i] === "string") a[i] = Number(a[i]);
  });
  Object.keys(D.s).forEach(function (key) {
    S[key] = D.s[key].map(function (x) { return typeof x === "string" ? Number(x) : x; });
  });
  Object.keys(D.derived).forEach(function (key) {  // columns rebuilt here, not sent
    var how = D.derived[key], base = V[how[1]], out = new Array(N);
    if (how[0] === "self") {
      var own = S[how[1]];
      for (var i = 0; i < N; i++) out[i] = innerPos[i] >= 0 ? own[innerPos[i]] : base[i];
    } else {
      var calls = V.calls;
      for (var j = 0; j < N; j++) out[j] = base[j] === null ? null : base[j] * calls[j];
    }
    V[key] = out;
  });
  var notCalled = new Uint8Array(N);
  D.not_called.forEach(function (i) { notCalled[i] = 1; });
  function label(i) { return path[i] || names[i] || "<root>"; }
  function describe(i) {
    var t = types[typ[i]], l = label(i);
    return l === t ? l : l + " (" + t + ")";
  }

  // ---- small DOM helpers -------------------------------------------------------------
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function sv(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  // The sections a plan or a generation adds (plan.js, generation.js) share these: a
  // table of columns [key, header, kind, tip] whose header click sorts largest first,
  // smallest first, then as given; cell(c, x) gives a cell's [class, text].
  function sortableTable(cols, rows, id, cls, cell) {
    var wrap = el("div", "tablewrap"), t = el("table", cls), th = el("thead"), tb = el("tbody");
    t.id = id;
    var tr = el("tr"), key = -1, dir = -1, trs = [];
    function missing(x) { return x === null || x === undefined || (typeof x === "number" && isNaN(x)); }
    function num(x) { return typeof x === "string" ? Number(x) : x; }
    cols.forEach(function (c, k) {
      var h = el("th", c[2] === "text" ? "txt" : "", c[1]);
      if (c[3]) h.title = c[3];
      h.tabIndex = 0;
      h.addEventListener("click", function () { sort(k); });
      h.addEventListener("keydown", function (ev) { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); sort(k); } });
      tr.appendChild(h);
    });
    th.appendChild(tr);
    rows.forEach(function (r) {
      var row = el("tr");
      cols.forEach(function (c, k) {
        var x = r[k], got = cell(c, x), td = el("td", got[0], got[1]);
        if (typeof x === "number" && c[2] !== "flag") td.title = String(x);
        row.appendChild(td);
      });
      trs.push(row); tb.appendChild(row);
    });
    function sort(k) {
      if (key !== k) { key = k; dir = cols[k][2] === "text" ? 1 : -1; }
      else if (dir === (cols[k][2] === "text" ? 1 : -1)) dir = -dir;
      else key = -1;
      var order = trs.map(function (_, i) { return i; });
      if (key >= 0) order.sort(function (a, b) {
        var u = num(rows[a][key]), w = num(rows[b][key]);
        if (u === w) return a - b;
        if (missing(u)) return 1;
        if (missing(w)) return -1;
        return (u < w ? -1 : 1) * dir;
      });
      Array.prototype.forEach.call(tr.children, function (h, j) {
        h.className = (cols[j][2] === "text" ? "txt " : "") + (j === key ? (dir > 0 ? "asc" : "desc") : "");
      });
      tb.replaceChildren.apply(tb, order.map(function (i) { return trs[i]; }));
    }
    t.appendChild(th); t.appendChild(tb); wrap.appendChild(t);
    return wrap;
  }
  function factList(pairs, id) {  // a <dl> of [term, value] pairs
    var dl = el("dl"); dl.id = id;
    pairs.forEach(function (f) { dl.appendChild(el("dt", "", f[0])); dl.appendChild(el("dd", "", f[1])); });
    return dl;
  }
  function placeFirst(nodes) {  // a section's nodes above the report's own, in order
    var first = document.body.querySelector("body > .cards") || document.body.querySelector("body > section");
    if (!first) { document.body.appendChild(nodes[0]); return; }  // no report: the section alone
    nodes.forEach(function (n) { document.body.insertBefore(n, first); });
  }
  window.lsDom = { el: el, sv: sv, sortableTable: sortableTable, factList: factList, placeFirst: placeFirst };
  function pressOnly(bar, field, value) {  // a segmented control: the button pressed
    Array.prototype.forEach.call(bar.children, function (b) {
      var on = b.dataset[field] === value;
      b.className = on ? "on" : ""; b.setAttribute("aria-pressed", on ? "true" : "false");
    });
  }
  function plotIn(sec, chart) {  // a chart and its tooltip at the end of a section
    var plot = el("div", "plot"), tip = el("div", "tip");
    plot.appendChild(chart); plot.appendChild(tip);
    sec.appendChild(plot);
    return tip;
  }
  function section(title, id) {
    var s = el("section"); s.id = id;
    var h = el("div", "head"); h.appendChild(el("h2", "", title));
    s.appendChild(h);
    return s;
  }

  // ---- header ------------------------------------------------------------------------
  var body = document.body, M = D.model || {}, E = D.env || {};
  body.appendChild(el("h1", "", M.name || types[typ[0]] || "model"));
  var facts = [M["class"], M.device, M.dtype, M.training === undefined ? null : (M.training ? "train mode" : "eval mode"),
    N + " modules"].filter(function (x) { return x; });
  body.appendChild(el("div", "sub", facts.join(" \u00b7 ")));
  var cards = el("div", "cards");
  D.headline.forEach(function (h) {
    var c = el("div", "card"), v = typeof h[1] === "string" ? Number(h[1]) : h[1];
    c.appendChild(el("b", "", fmt(v, h[2])));
    c.appendChild(el("span", "", h[0]));
    c.title = (h[4] ? h[4] + ": " : "") + String(v);
    if (h[3]) c.dataset.key = h[3];
    cards.appendChild(c);
  });
  body.appendChild(cards);

  // ---- chart metric and the icicle ----------------------------------------------------
  var chartKey = null, focus = 0;
  var prefer = ["flops", "forward_time_total", "params"];
  D.chart.forEach(function (c) {
    if (chartKey === null || prefer.indexOf(c.key) >= 0 && prefer.indexOf(c.key) < prefer.indexOf(chartKey) ||
      prefer.indexOf(chartKey) < 0 && prefer.indexOf(c.key) >= 0) chartKey = c.key;
  });
  function chartInfo() {
    for (var k = 0; k < D.chart.length; k++) if (D.chart[k].key === chartKey) return D.chart[k];
    return null;
  }
  function val(i) { var x = V[chartKey][i]; return x > 0 ? x : 0; }
  var icicle = null, crumbs = null, metricBar = null;
  if (D.chart.length) {
    var cs = section("Where it goes", "ls-chart");
    metricBar = el("div", "seg"); metricBar.id = "ls-metric";
    D.chart.forEach(function (c) {
      var b = el("button", c.key === chartKey ? "on" : "", c.label);
      b.type = "button"; b.dataset.key = c.key;
      b.setAttribute("aria-pressed", c.key === chartKey ? "true" : "false");
      b.addEventListener("click", function () { setMetric(c.key); });
      metricBar.appendChild(b);
    });
    cs.firstChild.appendChild(metricBar);
    cs.firstChild.appendChild(el("span", "note", "Icicle: width \u221d the metric; click to zoom in, click the top bar to zoom out."));
    crumbs = el("div", "crumbs"); cs.appendChild(crumbs);
    icicle = sv("svg", { id: "ls-icicle", role: "img" });
    cs.appendChild(icicle);
    body.appendChild(cs);
  }
  function hue(s) {
    var h = 0;
    for (var k = 0; k < s.length; k++) h = (h * 31 + s.charCodeAt(k)) | 0;
    return ((h % 360) + 360) % 360;
  }
  function drawIcicle() {
    if (!icicle) return;
    var W = Math.max(icicle.clientWidth || icicle.parentNode.clientWidth - 32, 300);
    var rowH = 22, maxRows = 12, rects = [];
    (function layout(i, x0, x1, row) {
      if (x1 - x0 < 0.5) return;
      rects.push([i, x0, x1, row]);
      var ks = kids[i];
      if (!ks || row + 1 >= maxRows) return;
      var sum = 0, k;
      for (k = 0; k < ks.length; k++) sum += val(ks[k]);
      var whole = Math.max(val(i), sum);
      if (!whole) return;
      var scale = (x1 - x0) / whole, x = x0;
      for (k = 0; k < ks.length; k++) {
        var w = val(ks[k]) * scale;
        layout(ks[k], x, x + w, row + 1);
        x += w;
      }
    })(focus, 0, W, 0);
    var rows = 0, info = chartInfo(), total = val(0) || 1, frag = document.createDocumentFragment();
    rects.forEach(function (r) {
      var i = r[0], w = r[2] - r[1], t = types[typ[i]];
      rows = Math.max(rows, r[3] + 1);
      var gr = sv("g", { "data-i": i });
      gr.appendChild(sv("rect", {
        x: r[1].toFixed(1), y: r[3] * rowH, width: Math.max(w, 0.5).toFixed(1), height: rowH - 1,
        fill: "hsl(" + hue(t) + ",55%," + (78 - Math.min(r[3], 6) * 3) + "%)"
      }));
      var tt = sv("title", {});
      tt.textContent = describe(i) + "\n" + info.label + ": " + fmt(V[chartKey][i], info.kind) +
        " (" + pct(100 * val(i) / total) + " of the model)";
      gr.appendChild(tt);
      var chars = Math.floor((w - 8) / 6.6);
      if (chars >= 3) {
        var text = names[i] === t ? t : names[i] + " " + t, tx = sv("text", { x: (r[1] + 4).toFixed(1), y: r[3] * rowH + 15 });
        tx.textContent = text.length > chars ? text.slice(0, chars - 1) + "\u2026" : text;
        gr.appendChild(tx);
      }
      frag.appendChild(gr);
    });
    icicle.replaceChildren(frag);
    icicle.setAttribute("height", rows * rowH);
    icicle.setAttribute("viewBox", "0 0 " + W + " " + rows * rowH);
    icicle.setAttribute("aria-label", "icicle chart of " + info.label + " per module");
    icicle.dataset.metric = chartKey;
    crumbs.replaceChildren();
    var chain = [];
    for (var j = focus; j >= 0; j = parent[j]) chain.unshift(j);
    chain.forEach(function (j, k) {
      if (k) crumbs.appendChild(document.createTextNode(" \u203a "));
      var a = el(j === focus ? "span" : "a", "", j === 0 ? names[0] : names[j]);
      if (j !== focus) a.addEventListener("click", function () { focus = j; drawIcicle(); });
      crumbs.appendChild(a);
    });
  }
  if (icicle) icicle.addEventListener("click", function (ev) {
    var gEl = ev.target.closest && ev.target.closest("g");
    if (!gEl) return;
    var i = +gEl.getAttribute("data-i");
    focus = i === focus && parent[i] >= 0 ? parent[i] : (kids[i] ? i : focus);
    drawIcicle();
  });

  // ---- memory timeline ---------------------------------------------------------------
  var T = D.timeline, tl = null, tlTip = null, tlLegend = null;
  if (T) {
    var ts = section("Memory timeline", "ls-memory");
    ts.firstChild.appendChild(el("span", "note",
      "Live bytes (" + T.allocator + " allocator) at every module entry and exit of the analysis pass" +
      (T.allocator === "cuda" ? "; " : " and the highest level between two of them; ") +
      "x: aten ops dispatched (op order, not time)." +
      (T.allocator === "cuda" ? " Peaks inside a module fall between samples (see Peak). " : " ") +
      "Hover for the module." +
      (T.dropped ? " " + T.dropped + " later events were not kept." : "")));
    if (T.baseline !== undefined) {  // what the rank held when the run began
      ts.firstChild.appendChild(el("span", "note", " Held when the run began (the line's 0): " +
        nbytes(T.baseline) + (T.baseline_kinds.length ? " (" + T.baseline_kinds.map(function (k) {
          return k[0] + " " + nbytes(k[1]);
        }).join(", ") + ")" : "") + "; absolute peak " + nbytes(T.absolute_peak) + "."));
      ts.firstChild.lastChild.id = "ls-baseline";
    }
    tl = sv("svg", { id: "ls-timeline", role: "img", "aria-label": "live bytes over op order" });
    tlTip = plotIn(ts, tl);
    tlLegend = el("div", "note"); tlLegend.id = "ls-tl-legend"; ts.appendChild(tlLegend);
    body.appendChild(ts);
  }
  var EVENTS = { e: "enter", x: "exit", b: "backward", p: "peak in", n: "end of the run" };
  function card(key) {  // a headline figure by its key, or null
    for (var k = 0; k < D.headline.length; k++) if (D.headline[k][3] === key) return D.headline[k];
    return null;
  }
  function tlName(k) {
    var n = T.node[k];
    return typeof n === "number" ? describe(n) : (n || "<root>");
  }
  function drawTimeline() {
    if (!tl) return;
    // top: room above the highest point for its label, which so never meets the line
    var W = Math.max(tl.clientWidth || tl.parentNode.clientWidth, 300), H = 196;
    var L = 76, R = 14, top = 28, B = 26, pw = W - L - R, ph = H - top - B;
    var ops = T.op, by = T.bytes, ev = T.event, n = ops.length, lastOp = ops[n - 1];
    var maxOp = Math.max(lastOp * 1.02, lastOp + 1);  // room for the last step
    var lo = 0, hi = 1, peak = 0;
    for (var k0 = 0; k0 < n; k0++) {
      if (by[k0] < lo) lo = by[k0];
      if (by[k0] > hi) hi = by[k0];
      if (by[k0] > by[peak]) peak = k0;
    }
    function sx(o) { return L + pw * o / maxOp; }
    function sy(b) { return top + ph * (1 - (b - lo) / (hi - lo)); }
    var frag = document.createDocumentFragment(), axis = sv("g", { "class": "axis" });
    [lo, (lo + hi) / 2, hi].forEach(function (b) {
      axis.appendChild(sv("line", { x1: L, x2: W - R, y1: sy(b), y2: sy(b) }));
      var t = sv("text", { x: L - 6, y: sy(b) + 4, "text-anchor": "end" });
      t.textContent = nbytes(b); axis.appendChild(t);
    });
    (lastOp ? [[0, "start"], [lastOp, "end"]] : [[0, "start"]]).forEach(function (p) {
      var t = sv("text", { x: sx(p[0]), y: H - 8, "text-anchor": p[1] });
      t.textContent = p[0] ? count(p[0]) + " ops" : "op 0"; axis.appendChild(t);
    });
    frag.appendChild(axis);
    var firstBw = ev.indexOf("b"), bwHigh = -1;
    if (firstBw >= 0) {
      for (var k1 = firstBw; k1 < n; k1++) if (by[k1] > bwHigh) bwHigh = by[k1];
      var x0 = sx(ops[firstBw]), y0 = sy(by[firstBw]);
      frag.appendChild(sv("rect", { "class": "tl-bw", x: x0, y: top, width: Math.max(W - R - x0, 0), height: ph }));
      frag.appendChild(sv("line", { "class": "tl-start", x1: x0, x2: W - R, y1: y0, y2: y0 }));
      var bt = sv("text", { x: x0, y: H - 8 });  // on the op axis
      bt.textContent = "backward \u2192"; axis.appendChild(bt);
    }
    // a step line; events that fall on one pixel column keep their min, max and last
    var d = "M" + sx(ops[0]).toFixed(1) + " " + sy(by[0]).toFixed(1), lastX = sx(ops[0]), k = 1;
    while (k < n) {
      var x = sx(ops[k]), px = Math.round(x), mn = by[k], mx = by[k], last = by[k];
      while (k + 1 < n && Math.round(sx(ops[k + 1])) === px) {
        k++; mn = Math.min(mn, by[k]); mx = Math.max(mx, by[k]); last = by[k];
      }
      if (x !== lastX) d += "H" + x.toFixed(1);
      if (mn !== mx) d += "V" + sy(mn).toFixed(1) + "V" + sy(mx).toFixed(1);
      d += "V" + sy(last).toFixed(1);
      lastX = x; k++;
    }
    d += "H" + (W - R);
    frag.appendChild(sv("path", { "class": "tl-area", d: d + "V" + sy(lo).toFixed(1) + "H" + L + "Z", opacity: 0.6 }));
    frag.appendChild(sv("path", { "class": "tl-line", d: d }));
    frag.appendChild(sv("circle", { "class": "tl-peak", cx: sx(ops[peak]), cy: sy(by[peak]), r: 3.5 }));
    var pc = card("session_peak_bytes"), bc = card("backward_peak_bytes");
    var inBw = firstBw >= 0 && peak >= firstBw, where = (inBw ? "backward of " : "") + tlName(peak);
    var pt = sv("text", { y: sy(by[peak]) - 9, "class": "halo" }), pg = sv("g", { "class": "axis" });
    pt.id = "ls-tl-peak";
    pg.appendChild(pt); frag.appendChild(pg);
    var guide = sv("line", { "class": "tl-guide", y1: top, y2: top + ph, visibility: "hidden" });
    var dot = sv("circle", { "class": "tl-dot", r: 3.5, visibility: "hidden" });
    frag.appendChild(guide); frag.appendChild(dot);
    var hit = sv("rect", { x: L, y: top, width: pw, height: ph, fill: "transparent" });
    frag.appendChild(hit);
    tl.replaceChildren(frag);
    tl.setAttribute("height", H);
    tl.setAttribute("viewBox", "0 0 " + W + " " + H);
    // the highest point's label: centred on it, shortened to the plot's width, kept in it
    var lead = "highest " + nbytes(by[peak]) + (pc && pc[1] === by[peak] ? " = " + pc[0] : "") + " \u00b7 ";
    pt.textContent = lead + where;
    for (var cut = where.length; pt.getComputedTextLength() > pw && cut > 1; cut--) {
      pt.textContent = lead + where.slice(0, cut - 1) + "\u2026";
    }
    var tw = pt.getComputedTextLength();
    pt.setAttribute("x", Math.max(L, Math.min(sx(ops[peak]) - tw / 2, W - R - tw)).toFixed(1));
    var say = ["Highest point: " + nbytes(by[peak]) + ", " + (inBw ? "in the backward of " : "in ") + tlName(peak) +
      (pc && pc[1] === by[peak] ? " (the " + pc[0] + " card)." : ".")];
    if (pc && pc[1] > by[peak]) {
      say.push("The run's peak, " + nbytes(pc[1]) + " (" + pc[0] + "), fell between two samples.");
    }
    if (firstBw >= 0) {
      var rise = bwHigh - by[firstBw];
      say.push("Dashed: " + nbytes(by[firstBw]) + " live when the backward started; the backward's highest point is " +
        nbytes(rise) + " above it" + (bc && bc[1] === rise ? " (the " + bc[0] + " card)." : "."));
    }
    tlLegend.textContent = say.join(" ");
    var row = Array.prototype.filter.call(axis.childNodes, function (t) {  // the op axis
      return t.tagName === "text" && +t.getAttribute("y") === H - 8;
    });
    if (row.length === 3) {  // "backward →" only where it meets neither end's label
      var b0 = row[0].getBBox(), b1 = row[1].getBBox(), b2 = row[2].getBBox();
      if (b2.x < b0.x + b0.width + 8 || b2.x + b2.width + 8 > b1.x) axis.removeChild(row[2]);
    }
    hit.addEventListener("mousemove", function (ev) {
      var box = tl.getBoundingClientRect(), o = (ev.clientX - box.left - L) / pw * maxOp;
      var a = 0, b = n - 1;  // the last event at or before op o
      while (a < b) { var m = (a + b + 1) >> 1; if (ops[m] <= o) a = m; else b = m - 1; }
      var X = sx(ops[a]);
      guide.setAttribute("x1", X); guide.setAttribute("x2", X); guide.setAttribute("visibility", "visible");
      dot.setAttribute("cx", X); dot.setAttribute("cy", sy(by[a])); dot.setAttribute("visibility", "visible");
      tlTip.textContent = (T.event[a] === "n" ? EVENTS.n : (EVENTS[T.event[a]] || "?") + " " + tlName(a)) + "\n" + nbytes(by[a]) +
        " live \u00b7 op " + count(ops[a]);
      tlTip.style.display = "block";
      var left = ev.clientX - box.left + 12;
      tlTip.style.left = Math.min(left, W - 300) + "px";
      tlTip.style.top = Math.max(sy(by[a]) - 44, 0) + "px";
    });
    hit.addEventListener("mouseleave", function () {
      guide.setAttribute("visibility", "hidden"); dot.setAttribute("visibility", "hidden");
      tlTip.style.display = "none";
    });
  }

  // ---- roofline ----------------------------------------------------------------------
  var RL = D.roofline, rl = null, rlTip = null, rlPhase = null, rlNote = null;
  var PHASE_LABEL = { forward: "Forward", backward: "Backward" };
  if (RL) {
    var rlPhases = Object.keys(RL.phases);
    rlPhase = rlPhases[0];
    var rs = section("Roofline", "ls-roofline");
    if (rlPhases.length > 1) {
      var rlBar = el("div", "seg"); rlBar.id = "ls-rl-phase";
      rlPhases.forEach(function (p) {
        var b = el("button", p === rlPhase ? "on" : "", PHASE_LABEL[p] || p);
        b.type = "button"; b.dataset.phase = p;
        b.setAttribute("aria-pressed", p === rlPhase ? "true" : "false");
        b.addEventListener("click", function () {
          rlPhase = p;
          pressOnly(rlBar, "phase", p);
          drawRoofline();
        });
        rlBar.appendChild(b);
      });
      rs.firstChild.appendChild(rlBar);
    }
    var R0 = RL.roof;
    rs.firstChild.appendChild(el("span", "note", (R0
      ? "Roof: " + R0.name + " (" + R0.dtype + "): peak " + unit(R0.peak, "FLOP/s") + ", " +
        unit(R0.bandwidth, "B/s") + ", ridge " + g(R0.peak / R0.bandwidth, 3) + " FLOP/B. " +
        (R0.note ? R0.note + " " : "")
      : "No device spec given, so no roof (to_html(path, device=\"h100\") or --spec h100). ") +
      "One point per module's own work: x FLOPs per byte moved, y FLOP/s achieved (own FLOPs / own time, " +
      "all calls), area \u221d time. Hover for the module."));
    rlNote = el("div", "note"); rs.appendChild(rlNote);
    rl = sv("svg", { id: "ls-roofline-chart", role: "img", "aria-label": "roofline: FLOP/s against FLOPs per byte" });
    rlTip = plotIn(rs, rl);
    body.appendChild(rs);
  }
  function decade(x) { return Math.pow(10, x); }
  function plainTick(e) { return e >= -4 && e <= 6 ? String(decade(e)) : "1e" + e; }
  function rateTick(e) { return e >= 15 ? plainTick(e - 15) + " P" : si(decade(e)); }
  function unit(x, u) {  // 3 significant digits and a unit: "61.1 FLOP/s", "1.23 GFLOP/s"
    var t = Math.abs(x) < 1e3 ? g(x, 3) : si(x);
    return /[A-Z]$/.test(t) ? t + u : t + " " + u;
  }
  function modules(n) { return n + (n === 1 ? " module" : " modules"); }
  function drawRoofline() {
    if (!rl) return;
    var P = RL.phases[rlPhase], R = RL.roof, pts = [], placed = [], k;
    for (k = 0; k < P.i.length; k++) {
      var f = P.f[k], b = P.b[k], t = P.t[k], x = f / b, y;
      if (t) y = f / t;
      else if (R) y = Math.min(R.peak, R.bandwidth * x);  // not timed: on the roof
      else continue;
      var rt = R ? Math.max(f / R.peak, b / R.bandwidth) : 0;  // its roofline time
      // w: what sizes and ranks the point, its time (its roofline time when not timed)
      pts.push({ i: P.i[k], f: f, b: b, t: t, x: x, y: y, rt: rt, w: t || rt });
    }
    var xs = pts.map(function (p) { return p.x; }), ys = pts.map(function (p) { return p.y; });
    if (R) { xs.push(R.peak / R.bandwidth); ys.push(R.peak); }
    if (!xs.length) { rl.replaceChildren(); rlNote.textContent = "No module to place."; return; }
    var x0 = Math.floor(Math.log10(Math.min.apply(null, xs)) - 0.3), x1 = Math.ceil(Math.log10(Math.max.apply(null, xs)) + 0.3);
    // the right margin holds half the last x tick's label (centred on the plot's edge)
    var W = Math.max(rl.clientWidth || rl.parentNode.clientWidth, 300), H = 320;
    var L = 78, Rm = Math.max(16, 4 + 3.6 * plainTick(x1).length), top = 12, B = 36, pw = W - L - Rm, ph = H - top - B;
    var y0 = Math.floor(Math.log10(Math.min.apply(null, ys)) - 0.3), y1 = Math.ceil(Math.log10(Math.max.apply(null, ys)) + 0.2);
    function sx(x) { return L + pw * (Math.log10(x) - x0) / (x1 - x0); }
    function sy(y) { return top + ph * (1 - (Math.log10(y) - y0) / (y1 - y0)); }
    var frag = document.createDocumentFragment(), axis = sv("g", { "class": "axis" });
    var xstep = Math.ceil((x1 - x0) / 8), ystep = Math.ceil((y1 - y0) / 6), e;
    for (e = x0; e <= x1; e += xstep) {
      axis.appendChild(sv("line", { x1: sx(decade(e)), x2: sx(decade(e)), y1: top, y2: top + ph }));
      var tx = sv("text", { x: sx(decade(e)), y: top + ph + 14, "text-anchor": "middle" });
      tx.textContent = plainTick(e); axis.appendChild(tx);
    }
    for (e = y0; e <= y1; e += ystep) {
      axis.appendChild(sv("line", { x1: L, x2: L + pw, y1: sy(decade(e)), y2: sy(decade(e)) }));
      var ty = sv("text", { x: L - 6, y: sy(decade(e)) + 4, "text-anchor": "end" });
      ty.textContent = rateTick(e); axis.appendChild(ty);
    }
    var xl = sv("text", { x: L + pw / 2, y: H - 4, "text-anchor": "middle" });
    xl.textContent = "FLOPs per byte moved"; axis.appendChild(xl);
    var yl = sv("text", { x: 12, y: top + ph / 2, "text-anchor": "middle", transform: "rotate(-90 12 " + (top + ph / 2) + ")" });
    yl.textContent = "FLOP/s"; axis.appendChild(yl);
    frag.appendChild(axis);
    if (R) {
      var ridge = R.peak / R.bandwidth, xa = decade(x0), xb = decade(x1);
      var low = Math.max(xa, decade(y0) / R.bandwidth);  // where the slope enters the plot
      var d = "M" + sx(low).toFixed(1) + " " + sy(R.bandwidth * low).toFixed(1) +
        "L" + sx(ridge).toFixed(1) + " " + sy(R.peak).toFixed(1) + "L" + sx(xb).toFixed(1) + " " + sy(R.peak).toFixed(1);
      frag.appendChild(sv("path", { "class": "rl-roof", d: d }));
      var rg = sv("g", { "class": "axis" }), rt = sv("text", { x: sx(xb) - 4, y: sy(R.peak) - 6, "text-anchor": "end" });
      rt.textContent = R.name + " peak " + unit(R.peak, "FLOP/s"); rg.appendChild(rt);
      var rb = sv("text", { x: sx(ridge) + 6, y: sy(R.peak) + 14 });
      rb.textContent = "ridge " + g(ridge, 3) + " FLOP/B"; rg.appendChild(rb);
      // point labels keep clear of these two
      placed.push([sx(xb) - 4 - 6.2 * rt.textContent.length, sy(R.peak) - 6, 6.2 * rt.textContent.length]);
      placed.push([sx(ridge) + 6, sy(R.peak) + 14, 6.2 * rb.textContent.length]);
      frag.appendChild(rg);
    }
    var wmax = 0;
    pts.forEach(function (p) { if (p.w > wmax) wmax = p.w; });
    pts.sort(function (a, b) { return b.w - a.w; });  // small ones on top
    var dots = sv("g", {});
    pts.forEach(function (p) {
      var r = wmax ? 3 + 11 * Math.sqrt(p.w / wmax) : 4, c = sv("circle", {
        "class": p.t ? "rl-pt" : "rl-pt est", cx: sx(p.x).toFixed(1), cy: sy(p.y).toFixed(1), r: r.toFixed(1),
        fill: "hsl(" + hue(types[typ[p.i]]) + ",60%,55%)", "data-i": p.i
      });
      var lines = [describe(p.i), g(p.x, 3) + " FLOP/B \u00b7 " + unit(p.f, "FLOP") + ", " + nbytes(p.b) + " moved"];
      if (p.t) lines.push(unit(p.y, "FLOP/s") + " achieved, " + unit(p.b / p.t, "B/s") + " \u00b7 own time " + seconds(p.t));
      else lines.push("not timed: placed on the roof (" + unit(p.y, "FLOP/s") + ")");
      if (R) {
        lines.push((p.f / R.peak >= p.b / R.bandwidth ? "compute" : "memory") + "-bound, roofline time " + seconds(p.rt) +
          (p.t ? " \u00b7 efficiency " + pct(100 * p.rt / p.t) : ""));
      }
      c.dataset.tip = lines.join("\n");
      dots.appendChild(c);
    });
    frag.appendChild(dots);
    var labels = sv("g", { "class": "axis" }), named = 0;
    pts.forEach(function (p) {  // the five longest, where they do not overlap
      if (named >= 5) return;
      var lx = sx(p.x) + 8, ly = sy(p.y) - 8, text = label(p.i), wide = 6.2 * text.length;
      if (lx + wide > W - Rm) lx = sx(p.x) - 8 - wide;
      for (var q = 0; q < placed.length; q++) {
        var o = placed[q];
        if (Math.abs(o[1] - ly) < 13 && lx < o[0] + o[2] + 8 && o[0] < lx + wide + 8) return;
      }
      placed.push([lx, ly, wide]); named++;
      var lt = sv("text", { x: lx.toFixed(1), y: ly.toFixed(1), "class": "halo" });
      lt.textContent = text; labels.appendChild(lt);
    });
    frag.appendChild(labels);
    rl.replaceChildren(frag);
    rl.setAttribute("height", H);
    rl.setAttribute("viewBox", "0 0 " + W + " " + H);
    var missing = P.i.length - pts.length, notes = [];
    if (!P.timed) notes.push("No time was measured: each module sits on the roof, at the fastest the device " +
      "allows; area \u221d roofline time.");
    if (missing) notes.push(modules(missing) + " not timed, not shown.");
    if (P.no_flops) notes.push(modules(P.no_flops) + " moving bytes without FLOPs cannot be placed.");
    rlNote.textContent = notes.join(" ");
  }
  if (rl) {
    rl.addEventListener("mouseover", function (ev) {
      var c = ev.target;
      if (!c.dataset || !c.dataset.tip) return;
      var box = rl.getBoundingClientRect(), W = box.width;
      rlTip.textContent = c.dataset.tip;
      rlTip.style.display = "block";
      rlTip.style.left = Math.min(+c.getAttribute("cx") + 14, W - 320) + "px";
      rlTip.style.top = Math.max(+c.getAttribute("cy") - 60, 0) + "px";
    });
    rl.addEventListener("mouseout", function (ev) {
      if (ev.target.dataset && ev.target.dataset.tip) rlTip.style.display = "none";
    });
  }

  // ---- the module table --------------------------------------------------------------
  var cols = D.columns, shown = {};
  cols.forEach(function (c) { shown[c.key] = c.shown; });
  var expanded = new Uint8Array(N), saved = null, keep = null, found = null, hits = 0;
  var sortKey = null, sortDir = -1, order = null, rowCache = new Array(N);
  var ts2 = section("Modules", "ls-modules"), head = ts2.firstChild;
  var search = el("input"); search.type = "search"; search.id = "ls-filter";
  search.placeholder = "Filter by name, path or type"; search.setAttribute("aria-label", "filter modules");
  var depthSel = el("select"); depthSel.id = "ls-depth"; depthSel.setAttribute("aria-label", "expand to depth");
  var maxDepth = 0;
  for (var i0 = 0; i0 < N; i0++) if (depth[i0] > maxDepth) maxDepth = depth[i0];
  for (var d0 = 1; d0 <= Math.min(maxDepth, 12); d0++) depthSel.appendChild(new Option("Expand to depth " + d0, String(d0)));
  depthSel.appendChild(new Option("Expand all", "all"));
  var status = el("span", "note"); status.id = "ls-status";
  var colsBox = el("details", "cols"), colsList = el("div");
  colsBox.appendChild(el("summary", "", "Columns"));
  cols.forEach(function (c) {
    var lab = el("label"), cb = el("input");
    cb.type = "checkbox"; cb.checked = c.shown; cb.dataset.key = c.key;
    cb.addEventListener("change", function () { shown[c.key] = cb.checked; rebuild(); });
    lab.appendChild(cb); lab.appendChild(document.createTextNode(" " + c.header));
    colsList.appendChild(lab);
  });
  colsBox.appendChild(colsList);
  [search, depthSel, status, el("span", "grow"), colsBox].forEach(function (e) { head.appendChild(e); });
  var wrap = el("div", "tablewrap"), table = el("table"), thead = el("thead"), tbody = el("tbody");
  table.id = "ls-table";
  table.appendChild(thead); table.appendChild(tbody); wrap.appendChild(table); ts2.appendChild(wrap);
  body.appendChild(ts2);

  function visibleCols() { return cols.filter(function (c) { return shown[c.key]; }); }
  function buildHead() {
    var tr = el("tr"), th = el("th", "", "Module");
    th.dataset.key = "name"; tr.appendChild(th);
    visibleCols().forEach(function (c) {
      var h = el("th", c.kind === "text" ? "txt" : "", c.header);
      h.dataset.key = c.key;
      if (c.header.slice(-1) === "*") h.title = "Partial: some ops have no FLOP formula (see the notes)";
      tr.appendChild(h);
    });
    if (chartKey) {
      var base = chartKey.replace(/_total$/, ""), part = D.partial.indexOf(base) >= 0;
      var p = el("th", "", "% " + chartInfo().label + (part ? "*" : ""));
      p.dataset.key = "pct"; tr.appendChild(p);
    }
    Array.prototype.forEach.call(tr.children, function (h, c) {
      h.tabIndex = 0;
      if (minW[c]) h.style.minWidth = minW[c] + "px";
      var k = h.dataset.key;
      if (k === sortKey) { h.classList.add(sortDir > 0 ? "asc" : "desc"); h.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending"); }
    });
    thead.replaceChildren(tr);
  }
  function sortValue(key) {
    if (key === "name") return names;
    if (key === "pct") return V[chartKey];
    return V[key];
  }
  var collator = new Intl.Collator(undefined, { numeric: true });
  function cmpFor(key, dir) {
    var a = sortValue(key), text = key === "name" || key === "input_shape" || key === "output_shape";
    return function (x, y) {
      var u = a[x], w = a[y];
      var nu = u === null || u === undefined || u !== u, nw = w === null || w === undefined || w !== w;
      if (nu || nw) return nu === nw ? x - y : nu ? 1 : -1;  // missing values last
      if (text) { var c = collator.compare(String(u), String(w)); return c ? c * dir : x - y; }
      return u === w ? x - y : (u < w ? -dir : dir);
    };
  }
  function resort() {
    if (!sortKey) { order = null; return; }
    order = new Array(N);
    var cmp = cmpFor(sortKey, sortDir);
    D.inner.forEach(function (i) { order[i] = kids[i].slice().sort(cmp); });
  }
  function childrenOf(i) {
    var ks = order ? order[i] : kids[i];
    if (!ks) return [];
    return keep ? ks.filter(function (c) { return keep[c]; }) : ks;
  }
  function hasChildren(i) { return kids[i] && (!keep || childrenOf(i).length); }
  function rowOf(i) {
    var tr = rowCache[i];
    if (tr) return tr;
    tr = el("tr");
    tr.dataset.i = i;
    if (notCalled[i]) tr.className = "nc";
    var td = el("td", "mod");
    td.style.paddingLeft = (8 + depth[i] * 16) + "px";
    if (kids[i]) {
      var b = el("button", "tog");
      b.type = "button";
      td.appendChild(b);
    } else td.appendChild(el("span", "leaf"));
    if (i) td.appendChild(el("span", "nid", "(" + nid[i] + ")"));
    var rep = D.rep && D.rep[i];
    td.appendChild(el("span", "nm", names[i] + (rep ? " \u00d7" + rep : "")));
    if (types[typ[i]] !== names[i]) td.appendChild(el("span", "ty", types[typ[i]]));
    td.title = (path[i] || "<root>") + " \u2014 " + types[typ[i]] + (notCalled[i] ? " (not called)" : "");
    tr.appendChild(td);
    visibleCols().forEach(function (c) {
      var x = V[c.key][i], cell = el("td", c.kind === "text" ? "txt" : "", fmt(x, c.kind));
      if (x !== null && x !== undefined && c.kind !== "text") {
        var t = String(x), sk = S[c.key];
        if (sk && innerPos[i] >= 0 && sk[innerPos[i]] !== null) t += "\nself: " + sk[innerPos[i]];
        cell.title = t;
      }
      tr.appendChild(cell);
    });
    if (chartKey) {
      var tot = V[chartKey][0], x2 = V[chartKey][i], pc = el("td", "pct");
      if (tot > 0 && x2 !== null && x2 !== undefined) {
        var p = 100 * x2 / tot;
        var bar = el("i");
        bar.style.width = Math.max(0, Math.min(p, 100)) + "%";
        pc.appendChild(bar);
        pc.appendChild(el("span", "", pct(p)));
        pc.title = String(p);
      }
      tr.appendChild(pc);
    }
    rowCache[i] = tr;
    return tr;
  }
  function setGlyph(i) {
    var b = rowCache[i] && rowCache[i].firstChild.firstChild;
    if (!b || b.tagName !== "BUTTON") return;
    var open = !!expanded[i] && hasChildren(i);
    b.textContent = open ? "\u25be" : "\u25b8";
    b.setAttribute("aria-expanded", open ? "true" : "false");
    b.setAttribute("aria-label", (open ? "collapse " : "expand ") + (path[i] || names[i]));
    b.style.visibility = hasChildren(i) ? "visible" : "hidden";
  }
  function collect(i, out) {  // the rows below i that are visible, in order
    var stack = expanded[i] ? childrenOf(i).slice().reverse() : [];
    while (stack.length) {
      var j = stack.pop();
      out.push(j);
      if (expanded[j]) { var ks = childrenOf(j); for (var k = ks.length - 1; k >= 0; k--) stack.push(ks[k]); }
    }
    return out;
  }
  // Rows on screen only: the visible list (expanded rows, in order) is windowed by the
  // scroll position; spacer rows stand for the rest, so a 10,000-row list costs no more
  // to sort or collapse than a short one.
  var list = [], rowH = 25, first = -1, last = -1, minW = [];
  var spTop = el("tr", "sp"), spBot = el("tr", "sp");
  spTop.appendChild(el("td")); spBot.appendChild(el("td"));
  function paint(force) {
    var n = list.length, view = wrap.clientHeight || window.innerHeight || 800;
    var at = Math.max(0, wrap.scrollTop - (thead.offsetHeight || rowH));
    var top = Math.floor(at / rowH), vis = Math.ceil(view / rowH);
    if (!force && Math.max(0, top - 20) >= first && Math.min(n, top + vis + 20) <= last) return;
    first = Math.max(0, top - 80); last = Math.min(n, top + vis + 80);
    spTop.style.height = first * rowH + "px";
    spBot.style.height = (n - last) * rowH + "px";
    var frag = document.createDocumentFragment();
    frag.appendChild(spTop);
    for (var k = first; k < last; k++) {
      var tr = rowOf(list[k]);
      tr.classList.toggle("hit", !!(found && found[list[k]]));
      frag.appendChild(tr);
      setGlyph(list[k]);
    }
    frag.appendChild(spBot);
    tbody.replaceChildren(frag);
    if (last > first) {
      var h = rowOf(list[first]).getBoundingClientRect().height;
      if (h > 1 && Math.abs(h - rowH) > 0.25) { rowH = h; paint(true); return; }
    }
    var cells = thead.rows[0] ? thead.rows[0].cells : [];  // columns never shrink while scrolling
    for (var c = 0; c < cells.length; c++) {
      var w = cells[c].offsetWidth;
      if (w > (minW[c] || 0)) { minW[c] = w; cells[c].style.minWidth = w + "px"; }
    }
  }
  function shownText() {
    status.textContent = (keep ? hits + " matching \u00b7 " : "") + list.length + " of " + N + " rows shown";
  }
  function render() {
    list = collect(0, [0]);
    paint(true);
    shownText();
  }
  function rebuild() {
    rowCache = new Array(N); minW = []; buildHead();
    spTop.firstChild.colSpan = spBot.firstChild.colSpan = thead.rows[0].cells.length;
    render();
  }
  function toggle(i) {
    var p = list.indexOf(i);
    if (p < 0 || !hasChildren(i)) return 0;
    var n0 = list.length;
    if (expanded[i]) {
      var q = p + 1;
      while (q < list.length && depth[list[q]] > depth[i]) q++;
      list.splice(p + 1, q - p - 1);
      expanded[i] = 0;
    } else {
      expanded[i] = 1;
      list = list.slice(0, p + 1).concat(collect(i, []), list.slice(p + 1));
    }
    setGlyph(i);
    paint(true);
    shownText();
    return list.length - n0;
  }
  var pending = false;
  wrap.addEventListener("scroll", function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; paint(false); });
  }, { passive: true });
  function expandTo(d) {
    for (var i = 0; i < N; i++) expanded[i] = depth[i] < d ? 1 : 0;
  }
  function applyFilter() {
    var q = search.value.trim().toLowerCase();
    if (!q) {
      if (keep) { keep = found = null; if (saved) expanded = saved; saved = null; }
      render();
      return;
    }
    if (!keep) saved = expanded.slice();
    keep = new Uint8Array(N); found = new Uint8Array(N); hits = 0;
    for (var i = 0; i < N; i++) {
      var hay = (names[i] + "\u0000" + types[typ[i]] + "\u0000" + path[i]).toLowerCase();
      if (hay.indexOf(q) >= 0) {
        found[i] = 1; hits++;
        for (var j = i; j >= 0 && !keep[j]; j = parent[j]) keep[j] = 1;
      }
    }
    keep[0] = 1;
    expanded = new Uint8Array(N);
    for (var k = 0; k < N; k++) if (keep[k] && parent[k] >= 0) expanded[parent[k]] = 1;
    render();
  }
  function setMetric(key) {
    chartKey = key; focus = 0;
    pressOnly(metricBar, "key", key);
    drawIcicle();
    if (sortKey === "pct") resort();
    rebuild();
  }
  function sortBy(key) {
    if (sortKey !== key) { sortKey = key; sortDir = key === "name" ? 1 : -1; }
    else if (sortDir === (key === "name" ? 1 : -1)) sortDir = -sortDir;
    else sortKey = null;  // third click: tree order
    resort();
    buildHead();
    render();
  }
  thead.addEventListener("click", function (ev) {
    var th = ev.target.closest("th");
    if (th) sortBy(th.dataset.key);
  });
  thead.addEventListener("keydown", function (ev) {
    var th = ev.target.closest("th");
    if (th && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); sortBy(th.dataset.key); }
  });
  tbody.addEventListener("click", function (ev) {
    var b = ev.target.closest(".tog");
    if (b) toggle(+b.closest("tr").dataset.i);
  });
  var timer = 0;
  search.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(applyFilter, 120); });
  depthSel.addEventListener("change", function () {
    var v = depthSel.value;
    if (keep) { search.value = ""; keep = found = null; saved = null; }
    expandTo(v === "all" ? Infinity : +v);
    render();
  });

  // ---- notes: summary facts and unsupported ops ---------------------------------------
  var notes = section("Notes", "ls-notes"), ul = el("ul", "facts");
  D.facts.forEach(function (f) {
    var cls = f[1] === "layerscope.error" ? "error" : f[1] === "layerscope.notice" ? "notice" : "";
    ul.appendChild(el("li", cls, f[0]));
  });
  notes.appendChild(ul);
  if (D.unsupported.length) {
    notes.appendChild(el("h2", "", "Ops without a FLOP formula"));
    var ot = el("table", "ops"), oh = el("tr");
    ot.id = "ls-unsupported";
    ["Op", "Count", "Forward", "Backward", "Modules"].forEach(function (h) { oh.appendChild(el("th", "", h)); });
    var othead = el("thead"); othead.appendChild(oh); ot.appendChild(othead);
    var otb = el("tbody");
    D.unsupported.forEach(function (r) {
      var tr = el("tr");
      tr.appendChild(el("td", "", r[0]));
      [r[1], r[2], r[3]].forEach(function (x) { tr.appendChild(el("td", "n", count(x))); });
      tr.appendChild(el("td", "", r[4].join(", ")));
      otb.appendChild(tr);
    });
    ot.appendChild(otb); notes.appendChild(ot);
  }
  body.appendChild(notes);
  body.appendChild(el("footer", "", ["layerscope " + (E.layerscope || ""), "torch " + (E.torch || ""),
    "python " + (E.python || ""), D.schema].join(" \u00b7 ")));

  // ---- first paint -------------------------------------------------------------------
  var perDepth = new Array(maxDepth + 1).fill(0), rowsAt = 1, upTo = 0;
  for (var q = 0; q < N; q++) perDepth[depth[q]]++;
  for (var dd = 0; dd <= maxDepth; dd++) {  // open levels while at most 150 rows show
    upTo += perDepth[dd];
    if (dd > 1 && upTo > 150) break;
    rowsAt = Math.max(dd, 1);
  }
  expandTo(rowsAt);
  depthSel.value = String(Math.min(rowsAt, 12));
  rebuild();
  drawIcicle();
  drawTimeline();
  drawRoofline();
  var resizeTimer = 0;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { drawIcicle(); drawTimeline(); drawRoofline(); }, 150);
  });
  window.lsReport = { ready: performance.now(), toggle: toggle, sortBy: sortBy, path: path };
  body.dataset.ready = "1";
})();
