/* layerscope HTML report: the generation section (generation/html.py). Reads #ls-gen-data
   and draws it first on the page, above the profile of one stage. Numbers use the
   report's formats (window.lsFormat); every string reaches the DOM as textContent. */
  var G = JSON.parse(document.getElementById("ls-gen-data").textContent);
  var base = window.lsFormat;

  function num(x) { return typeof x === "string" ? Number(x) : x; }
  function has(x) { return x !== null && x !== undefined && !(typeof x === "number" && isNaN(x)); }
  function fmt(x, kind) {
    if (kind === "text") return has(x) ? String(x) : "";
    if (kind === "fits") return x === true ? "yes" : x === false ? "no" : "";
    x = num(x);
    return has(x) ? base(x, kind) : "";
  }
  function plural(n, word) { return fmt(n, "count") + " " + word + (n === 1 ? "" : "s"); }
  var el = window.lsDom.el, sv = window.lsDom.sv;
  var section = window.lsDom.section;
  function swatch(cls, label, value) {  // one legend entry
    var s = el("span");
    if (cls) s.appendChild(el("i", cls));
    s.appendChild(document.createTextNode(label + (value !== undefined ? " " : "")));
    if (value !== undefined) s.appendChild(el("b", "", value));
    return s;
  }
  function buttons(id, choices, on, pick) {  // a segmented control
    var seg = el("div", "seg"); seg.id = id;
    choices.forEach(function (c) {
      var b = el("button", "", c[1]);
      b.type = "button"; b.dataset.key = c[0];
      b.addEventListener("click", function () { pick(c[0]); press(seg, c[0]); });
      seg.appendChild(b);
    });
    press(seg, on);
    return seg;
  }
  function press(seg, key) {
    Array.prototype.forEach.call(seg.children, function (b) {
      var yes = b.dataset.key === key;
      b.className = yes ? "on" : ""; b.setAttribute("aria-pressed", yes ? "true" : "false");
    });
  }
  function plotOf(sec, svg) {  // a chart and its tooltip
    var plot = el("div", "plot"), tip = el("div", "tip");
    plot.appendChild(svg); plot.appendChild(tip); sec.appendChild(plot);
    return tip;
  }

  // ---- title, cards and the stages ---------------------------------------------------
  var O = G.options || {}, K = G.kv, C = G.calls, E = G.estimate;
  var root = el("div"); root.id = "ls-gen";
  root.appendChild(el("h2", "gn-title", G.measured ? "Generation" : "Generation estimate"));
  var said = [
    plural(O.batch, "prompt") + " of " + plural(O.prompt_tokens, "token"),
    plural(O.new_tokens, "new token") + " each",
    plural(O.rows, "row") + (O.rows !== O.batch ? " (beams or samples)" : ""),
    O.use_cache === false ? "no cache: full forwards" : "a KV cache",
    O.encoder_decoder ? "encoder-decoder" : null,
    O.timing_repeats ? "each call timed, the median of " + plural(O.timing_repeats, "repeat") : "not timed"
  ].filter(function (x) { return x; });
  if (G.measured) root.appendChild(el("div", "sub", said.join(" \u00b7 ")));
  var cards = el("div", "cards"); cards.id = "ls-gen-cards";
  function card(box, label, value, what) {
    var c = el("div", "card");
    c.appendChild(el("b", "", value)); c.appendChild(el("span", "", label));
    c.title = what;
    box.appendChild(c);
  }
  card(cards, "Prompt tokens", fmt(O.prompt_tokens, "count"), plural(O.batch, "prompt") + " of " +
    plural(O.prompt_tokens, "token") + " each");
  card(cards, "New tokens", fmt(O.new_tokens, "count"), "per sequence; the last one is produced, not fed back");
  card(cards, "Rows", fmt(O.rows, "count"), "the sequences every call computes: " + plural(O.batch, "prompt") +
    " \u00d7 " + (O.batch ? O.rows / O.batch : 1) + " (beams or samples per prompt)");
  if (K) {
    card(cards, "KV cache at the end", fmt(K.bytes_final, "bytes"), K.held +
      (K.cross_bytes ? " (self-attention), cross-attention " + fmt(K.cross_bytes, "bytes") : "") +
      ": " + K.bytes_final + " B; " + fmt(K.bytes_after_prefill, "bytes") + " after the prefill");
    card(cards, "KV per token and row", fmt(K.bytes_per_token, "bytes"), "keys and values of every " +
      "self-attention layer for one token of one sequence: " + K.bytes_per_token + " B");
  }
  G.stages.forEach(function (s) {
    if (has(s.time)) {
      card(cards, s.name.charAt(0).toUpperCase() + s.name.slice(1) + " time", fmt(s.time, "seconds"), plural(s.calls, "call") + ", timed: " + s.time + " s");
    }
  });
  if (G.measured) root.appendChild(cards);
  var sl = el("ul", "facts"); sl.id = "ls-gen-stages";
  G.stages.forEach(function (s) {
    sl.appendChild(el("li", "", s.name + ": " + [plural(s.calls, "call"), fmt(s.macs, "si") + " MACs",
      fmt(s.flops, "si") + " FLOPs", fmt(s.bytes_accessed, "bytes") + " moved",
      has(s.time) ? fmt(s.time, "seconds") : null].filter(function (x) { return x; }).join(", ")));
  });
  if (G.measured) root.appendChild(sl);

  // ---- a line chart: points over x, some drawn apart on the left ---------------------
  function ticks(hi, kind) {  // 0 to a round top, about 4 steps
    var unit = 1;
    if (kind === "bytes") while (hi / unit >= 1024) unit *= 1024;
    var raw = hi / unit / 4, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    var step = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p * unit;
    var n = Math.max(1, Math.ceil(hi / step - 1e-9)), out = [];
    for (var k = 0; k <= n; k++) out.push(k * step);
    return out;
  }
  function text(g, x, y, s, anchor, cls) {
    var t = sv("text", { x: x, y: y, "text-anchor": anchor || "middle" });
    if (cls) t.setAttribute("class", cls);
    t.textContent = s; g.appendChild(t);
    return t;
  }
  function drawLine(S) {
    var svg = S.svg, W = Math.max(svg.clientWidth || svg.parentNode.clientWidth, 260), H = 250;
    var narrow = W < 560, L = narrow ? 60 : 74, R = 16, top = 30, B = 44, ph = H - top - B;
    var line = [], apart = [], k;
    S.ys.forEach(function (y, i) {
      if (!has(num(y))) return;
      if (S.apart.indexOf(i) >= 0) apart.push(i); else if (has(S.xs[i])) line.push(i);
    });
    var panel = apart.length ? (narrow ? 58 : 80) : 0, gap = apart.length ? 16 : 0;
    var x0 = L + panel + gap, pw = Math.max(W - R - x0, 40), pad = 10;
    function yv(i) { return num(S.ys[i]); }
    function xv(i) { var v = num(S.xs[i]); return S.xLog ? Math.log(v) / Math.LN2 : v; }
    var hiLine = 0, hiAll = 0, xmin = Infinity, xmax = -Infinity;
    line.forEach(function (i) { hiLine = Math.max(hiLine, yv(i)); xmin = Math.min(xmin, xv(i)); xmax = Math.max(xmax, xv(i)); });
    apart.forEach(function (i) { hiAll = Math.max(hiAll, yv(i)); });
    hiAll = Math.max(hiAll, hiLine);
    var yt = ticks((S.scaleAll || !line.length ? hiAll : hiLine) || 1, S.kind), hi = yt[yt.length - 1];
    function sy(v) { return top + ph * (1 - Math.min(v, hi) / hi); }
    function sx(i) {
      return xmax > xmin ? x0 + pad + (pw - 2 * pad) * (xv(i) - xmin) / (xmax - xmin) : x0 + pw / 2;
    }
    var frag = document.createDocumentFragment(), axis = sv("g", { "class": "axis" }), at = {};
    yt.forEach(function (v) {
      axis.appendChild(sv("line", { x1: L, x2: W - R, y1: sy(v), y2: sy(v) }));
      text(axis, L - 6, sy(v) + 4, v ? fmt(v, S.kind) : "0", "end");
    });
    if (panel) {
      frag.appendChild(sv("rect", { "class": "gn-panel", x: L, y: top, width: panel, height: ph }));
      text(axis, L + panel / 2, top + ph + 16, S.apartLabel);
      apart.forEach(function (i, j) { at[i] = L + panel * (j + 1) / (apart.length + 1); });
    }
    line.forEach(function (i) { at[i] = sx(i); });
    if (line.length) {  // x ticks: the points' own values (log scale) or round steps
      var last = -Infinity, shown = [];
      if (S.xLog) shown = line.map(function (i) { return num(S.xs[i]); });
      else {
        var lo = Math.min.apply(null, line.map(xv)), span = xmax - xmin, want = Math.max(2, Math.floor(pw / 70));
        var raw = span / want, p = Math.pow(10, Math.floor(Math.log10(raw || 1))), m = raw / p;
        var step = Math.max(1, (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p);
        for (var v = Math.ceil(lo / step) * step; v <= xmax + 1e-9; v += step) shown.push(v);
        if (!shown.length) shown.push(lo);
      }
      shown.forEach(function (v) {
        var X = xmax > xmin ? x0 + pad + (pw - 2 * pad) * ((S.xLog ? Math.log(v) / Math.LN2 : v) - xmin) / (xmax - xmin) : x0 + pw / 2;
        if (X - last < 34) return;
        last = X;
        axis.appendChild(sv("line", { "class": "gn-tick", x1: X, x2: X, y1: top + ph, y2: top + ph + 4 }));
        text(axis, X, top + ph + 16, fmt(v, "count"));
      });
      text(axis, x0 + pw / 2, H - 6, S.xLabel);
    }
    frag.appendChild(axis);
    if (line.length > 1) {
      var d = "";
      line.forEach(function (i, j) { d += (j ? "L" : "M") + at[i].toFixed(1) + " " + sy(yv(i)).toFixed(1); });
      var path = sv("path", { "class": "gn-line", d: d, "data-points": line.length });
      path.id = S.id + "-line";
      frag.appendChild(path);
    }
    var marks = sv("g", {});
    line.concat(apart).forEach(function (i) {
      var off = yv(i) > hi, cx = at[i], cy = off ? top + 4 : sy(yv(i));
      var cls = "gn-pt " + (S.cls ? S.cls(i) : "") + (apart.indexOf(i) >= 0 ? " gn-apart" : "") + (off ? " gn-off" : "");
      var m = off ? sv("path", { d: "M" + (cx - 5) + " " + (cy + 4) + "L" + cx + " " + (cy - 5) + "L" + (cx + 5) + " " + (cy + 4) + "Z" })
        : sv("circle", { cx: cx.toFixed(1), cy: cy.toFixed(1), r: 3.5 });
      m.setAttribute("class", cls);
      m.dataset.i = String(i); m.dataset.x = String(S.xs[i]); m.dataset.y = String(yv(i));
      marks.appendChild(m);
      if (apart.indexOf(i) >= 0) text(marks, cx, cy - 9, fmt(yv(i), S.kind) + (off ? " \u2191" : ""), "middle", "halo gn-label");
    });
    frag.appendChild(marks);
    var guide = sv("line", { "class": "tl-guide", y1: top, y2: top + ph, visibility: "hidden" });
    var hit = sv("rect", { x: L, y: top, width: W - R - L, height: ph, fill: "transparent" });
    frag.appendChild(guide); frag.appendChild(hit);
    svg.replaceChildren(frag);
    svg.setAttribute("height", H);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.dataset.top = String(hi);
    var drawn = line.concat(apart);
    hit.addEventListener("mousemove", function (ev) {
      var box = svg.getBoundingClientRect(), X = (ev.clientX - box.left) * W / box.width, best = -1;
      for (k = 0; k < drawn.length; k++) if (best < 0 || Math.abs(at[drawn[k]] - X) < Math.abs(at[best] - X)) best = drawn[k];
      if (best < 0) return;
      guide.setAttribute("x1", at[best]); guide.setAttribute("x2", at[best]); guide.setAttribute("visibility", "visible");
      S.tip.textContent = S.tipText(best);
      S.tip.style.display = "block";
      S.tip.style.left = Math.max(0, Math.min(at[best] * box.width / W + 12, box.width - 300)) + "px";
      S.tip.style.top = Math.max(Math.min(sy(yv(best)), top + ph) - 30, 0) + "px";
    });
    hit.addEventListener("mouseleave", function () { guide.setAttribute("visibility", "hidden"); S.tip.style.display = "none"; });
  }

  // ---- per call: bytes moved, FLOPs, time against the cache --------------------------
  var col = {}, redraw = [];
  C.columns.forEach(function (c, k) { col[c[0]] = k; });
  function cellOf(i, key) { return col[key] === undefined ? null : C.rows[i][col[key]]; }
  var H2 = G.chart, n = C.rows.length;
  if (n && H2.metrics.length) {
    var metric = H2.metrics.some(function (m) { return m[0] === "time"; }) ? "time" : H2.metrics[0][0];
    var scaleAll = false, lineStages = {};
    C.rows.forEach(function (r, i) { if (H2.apart.indexOf(i) < 0) lineStages[cellOf(i, "stage")] = 1; });
    var lineName = Object.keys(lineStages).join(" and ") || "decode";
    var cs = section("Per call", "ls-gen-per-call", "Each model call against " + H2.x_label +
      (H2.apart.length ? "; the prefill apart, on the left" : "") + ". Hover for the call.");
    cs.firstChild.appendChild(buttons("ls-gen-metric", H2.metrics, metric, function (k) { metric = k; drawCalls(); }));
    if (H2.apart.length && H2.apart.length < n) {
      cs.firstChild.appendChild(buttons("ls-gen-scale", [["line", "Scale: " + lineName + " calls"], ["all", "Scale: all calls"]],
        "line", function (k) { scaleAll = k === "all"; drawCalls(); }));
    }
    var csvg = sv("svg", { id: "ls-gen-chart", role: "img", "aria-label": "each model call's cost against the cache length" });
    var ctip = plotOf(cs, csvg), clg = el("div", "gn-legend");
    clg.appendChild(swatch("gn-sw-line", lineName + " calls"));
    if (H2.apart.length) clg.appendChild(swatch("gn-sw-apart", "prefill (its value above it; \u2191 when above the scale)"));
    cs.appendChild(clg);
    root.appendChild(cs);
    var drawCalls = function () {
      var m = H2.metrics.filter(function (x) { return x[0] === metric; })[0];
      drawLine({
        svg: csvg, tip: ctip, id: "ls-gen-chart", kind: m[2], xLabel: H2.x_label, apartLabel: "prefill",
        xs: H2.x, ys: C.rows.map(function (r, i) { return cellOf(i, metric); }), apart: H2.apart, scaleAll: scaleAll,
        cls: function (i) { return "gn-s-" + cellOf(i, "stage"); },
        tipText: function (i) {
          var out = ["call " + (i + 1) + " of " + n + " \u00b7 " + cellOf(i, "stage"),
            fmt(cellOf(i, "cache_tokens") || 0, "count") + " tokens in the cache before it, " + fmt(cellOf(i, "tokens"), "count") + " fed per row"];
          C.columns.forEach(function (c, k) {
            if (c[2] !== "text" && c[0] !== "cache_tokens" && c[0] !== "tokens" && has(C.rows[i][k])) out.push(c[1] + " " + fmt(C.rows[i][k], c[2]));
          });
          return out.join("\n");
        }
      });
    };
    redraw.push(drawCalls);
  }

  // ---- the KV cache per layer ----------------------------------------------------------
  if (K && (K.self.length || K.cross.length)) {
    var layers = Math.max(K.self.length, K.cross.length), crossed = K.cross.some(function (b) { return b > 0; });
    var ks = section("KV cache per layer", "ls-gen-kv", "Bytes each layer's keys and values hold at the end" +
      (crossed ? ", self- and cross-attention apart" : "") + ". Hover for the layer.");
    var kfacts = el("ul", "facts");
    var selfSum = K.self.reduce(function (a, b) { return a + b; }, 0);
    var product = K.tokens_final * K.rows * K.bytes_per_token === selfSum;  // not with sliding windows
    var how = (product ? fmt(K.tokens_final, "count") + " tokens \u00d7 " + plural(K.rows, "row") + " \u00d7 " : "") +
      fmt(K.bytes_per_token, "bytes") + " per token and row";
    kfacts.appendChild(el("li", "", fmt(K.bytes_after_prefill, "bytes") + " after the prefill, " + fmt(K.bytes_final, "bytes") +
      " at the end" + (crossed ? ": " + fmt(selfSum, "bytes") + " of self-attention (" + how + ") and " +
      fmt(K.cross_bytes, "bytes") + " of cross-attention." : ": " + how + ".")));
    var lo = Math.min.apply(null, K.tokens), hiT = Math.max.apply(null, K.tokens);
    if (K.tokens.length && lo !== hiT) {
      kfacts.appendChild(el("li", "", "Layers hold " + fmt(lo, "count") + " to " + fmt(hiT, "count") +
        " tokens: a sliding-window layer stops growing at its window."));
    }
    ks.appendChild(kfacts);
    var ksvg = sv("svg", { id: "ls-gen-kv-chart", role: "img", "aria-label": "KV cache bytes per layer" });
    var ktip = plotOf(ks, ksvg), klg = el("div", "gn-legend");
    klg.appendChild(swatch("gn-self", "self-attention", fmt(selfSum, "bytes")));
    if (crossed) klg.appendChild(swatch("gn-cross", "cross-attention", fmt(K.cross_bytes, "bytes")));
    ks.appendChild(klg);
    root.appendChild(ks);
    var drawKV = function () {
      var W = Math.max(ksvg.clientWidth || ksvg.parentNode.clientWidth, 260), H = 210;
      var L = W < 560 ? 60 : 74, R = 16, top = 14, B = 40, ph = H - top - B, pw = W - L - R;
      var tot = [], k;
      for (k = 0; k < layers; k++) tot.push((K.self[k] || 0) + (K.cross[k] || 0));
      var yt = ticks(Math.max.apply(null, tot) || 1, "bytes"), hi = yt[yt.length - 1];
      function sy(v) { return top + ph * (1 - v / hi); }
      var band = pw / layers, bw = Math.max(1, Math.min(band * 0.72, 56)), every = Math.ceil(30 / band);
      var frag = document.createDocumentFragment(), axis = sv("g", { "class": "axis" });
      yt.forEach(function (v) {
        axis.appendChild(sv("line", { x1: L, x2: W - R, y1: sy(v), y2: sy(v) }));
        text(axis, L - 6, sy(v) + 4, v ? fmt(v, "bytes") : "0", "end");
      });
      text(axis, L + pw / 2, H - 6, "layer");
      frag.appendChild(axis);
      for (k = 0; k < layers; k++) {
        var x = L + band * k + (band - bw) / 2, s = K.self[k] || 0, c = K.cross[k] || 0;
        [["gn-self", s, 0], ["gn-cross", c, s]].forEach(function (p) {
          if (!p[1] && p[0] === "gn-cross") return;
          var r = sv("rect", { "class": p[0], x: x.toFixed(1), width: bw.toFixed(1), y: sy(p[2] + p[1]).toFixed(1),
            height: Math.max(sy(p[2]) - sy(p[2] + p[1]), 0).toFixed(1) });
          r.dataset.layer = String(k); r.dataset.bytes = String(p[1]);
          frag.appendChild(r);
        });
        if (k % every === 0) text(axis, L + band * (k + 0.5), top + ph + 16, String(k));
      }
      var hit = sv("rect", { x: L, y: top, width: pw, height: ph, fill: "transparent" });
      frag.appendChild(hit);
      ksvg.replaceChildren(frag);
      ksvg.setAttribute("height", H);
      ksvg.setAttribute("viewBox", "0 0 " + W + " " + H);
      hit.addEventListener("mousemove", function (ev) {
        var box = ksvg.getBoundingClientRect(), X = (ev.clientX - box.left) * W / box.width;
        var j = Math.max(0, Math.min(layers - 1, Math.floor((X - L) / band)));
        var lines = ["layer " + j + ": " + fmt(tot[j], "bytes"), "self-attention " + fmt(K.self[j] || 0, "bytes") +
          (has(K.tokens[j]) ? " (" + fmt(K.tokens[j], "count") + " tokens \u00d7 " + plural(K.rows, "row") + ")" : "")];
        if (crossed) lines.push("cross-attention " + fmt(K.cross[j] || 0, "bytes"));
        ktip.textContent = lines.join("\n");
        ktip.style.display = "block";
        ktip.style.left = Math.max(0, Math.min((L + band * (j + 0.5)) * box.width / W + 12, box.width - 280)) + "px";
        ktip.style.top = Math.max(sy(tot[j]) - 30, 0) + "px";
      });
      hit.addEventListener("mouseleave", function () { ktip.style.display = "none"; });
    };
    redraw.push(drawKV);
  }

  // ---- tables: the calls, an estimate's sweep ------------------------------------------
  function table(cols, rows, id) {
    return window.lsDom.sortableTable(cols, rows, id, "gn-table", function (c, x) {
      var cls = c[2] === "text" ? "txt" : c[2] === "fits" ? (x === false ? "gn-no" : x === true ? "gn-yes" : "") : "";
      return [cls, fmt(x, c[2])];
    });
  }
  if (n) {
    var ts = section("Model calls", "ls-gen-calls", "One row per call, in the order they ran; hover a " +
      "header for what it counts, a cell for the raw value.");
    ts.appendChild(table(C.columns, C.rows, "ls-gen-table"));
    root.appendChild(ts);
  }

  // ---- an estimate on a target ---------------------------------------------------------
  if (E) {
    var target = null, SW = E.sweep, sc = {};
    ["device label", "target", "device name"].forEach(function (name) {
      E.facts.forEach(function (f) { if (target === null && f[0] === name) target = f[1]; });
    });
    SW.columns.forEach(function (c, k) { sc[c[0]] = k; });
    var es = section("Estimate" + (target ? " on " + target : ""), "ls-gen-estimate",
      "Roofline times, computed, not measured: each call at its bound, a lower bound." +
      (SW.rows.length && sc.batch !== undefined ? " The cards: batch " + SW.rows[0][sc.batch] + ", the sweep's first." : ""));
    var ec = el("div", "cards"); ec.id = "ls-gen-estimate-cards";
    E.cards.forEach(function (c) { card(ec, c[0], fmt(c[1], c[2]), c[3] + ": " + c[1]); });
    if (E.cards.length) es.appendChild(ec);
    if (SW.rows.length && sc.batch !== undefined && sc.decode_time_per_token !== undefined) {
      var emetric = "decode_time_per_token", echoices = [["decode_time_per_token", "Decode per token", "seconds"]];
      if (sc.tokens_per_s !== undefined) echoices.push(["tokens_per_s", "Tokens/s", "rate"]);
      es.firstChild.appendChild(buttons("ls-gen-estimate-metric", echoices, emetric, function (k) { emetric = k; drawEstimate(); }));
      var esvg = sv("svg", { id: "ls-gen-batch-chart", role: "img", "aria-label": "estimated decode time against the batch" });
      var etip = plotOf(es, esvg), elg = el("div", "gn-legend");
      elg.appendChild(swatch("gn-sw-line", "per batch size"));
      if (sc.fits !== undefined && SW.rows.some(function (r) { return r[sc.fits] === false; })) {
        elg.appendChild(swatch("gn-sw-bad", "does not fit the GPU's memory"));
      }
      es.appendChild(elg);
      var drawEstimate = function () {
        var m = echoices.filter(function (x) { return x[0] === emetric; })[0];
        drawLine({
          svg: esvg, tip: etip, id: "ls-gen-batch-chart", kind: m[2], xLabel: "batch (sequences per call, log scale)", xLog: true,
          xs: SW.rows.map(function (r) { return r[sc.batch]; }), ys: SW.rows.map(function (r) { return r[sc[emetric]]; }),
          apart: [], cls: function (i) { return sc.fits !== undefined && SW.rows[i][sc.fits] === false ? "gn-bad" : ""; },
          tipText: function (i) {
            return SW.columns.map(function (c, k) { return c[1] + " " + fmt(SW.rows[i][k], c[2]); }).join("\n");
          }
        });
      };
      redraw.push(drawEstimate);
    }
    if (SW.rows.length) es.appendChild(table(SW.columns, SW.rows, "ls-gen-sweep"));
    var el2 = el("ul", "facts");
    E.notes.forEach(function (t) { el2.appendChild(el("li", "", t)); });
    if (E.notes.length) es.appendChild(el2);
    es.appendChild(window.lsDom.factList(E.facts, "ls-gen-estimate-facts"));
    root.appendChild(es);
  }

  // ---- notes and options ---------------------------------------------------------------
  if (G.measured) {
    root.appendChild(window.lsDom.notesSection(section("Generation notes", "ls-gen-notes"), G.notes,
      G.settings, "ls-gen-settings", "notice", "No notices."));
  }

  // ---- placed first, above the profile of one stage (an estimate's: its prefill) ------
  var st = G.stage, divider = el("h2", "gn-divider", st ? "The " + st[0] + " stage's profile" :
    G.measured ? "The profile" : "The prefill's profile");
  var first = E && E.sweep.rows.length && sc.batch !== undefined ? E.sweep.rows[0][sc.batch] : null;
  var dnote = el("div", "sub", st ? (st[1] > 1 ? "Its " + plural(st[1], "call") + " summed, module by module." :
    "Its call, module by module.") : G.measured ? "" : "The prefill of " + plural(first, "sequence") +
    ", analysed on meta for the target, module by module.");
  window.lsDom.settle(root, [divider, dnote], function () { redraw.forEach(function (f) { f(); }); });
