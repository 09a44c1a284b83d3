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
  function own(i) { var x = V[chartKey][i]; return x > 0 ? x : 0; }
  // A module's size: its own value, or the sum of its children's where that is more (a
  // container never called, a ModuleList, has no time of its own but its blocks' time).
  var sizes = {};
  function sizesOf(key) {
    if (sizes[key]) return sizes[key];
    var a = V[key], out = new Float64Array(N), i, x;
    for (i = 0; i < N; i++) { x = a[i]; out[i] = x > 0 ? x : 0; }
    var sum = new Float64Array(N);
    for (i = N - 1; i > 0; i--) {  // pre-order: every child comes after its parent
      if (kids[i]) out[i] = Math.max(out[i], sum[i]);
      sum[parent[i]] += out[i];
    }
    if (N && kids[0]) out[0] = Math.max(out[0], sum[0]);
    return (sizes[key] = out);
  }
  function val(i) { return sizesOf(chartKey)[i]; }
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
      var tt = sv("title", {}), mine = V[chartKey][i];
      tt.textContent = describe(i) + "\n" + info.label + ": " + (val(i) > own(i)
        ? fmt(val(i), info.kind) + ", the sum of its modules' (" + (mine === null || mine === undefined
          ? "never called itself" : "its own: " + fmt(mine, info.kind)) + ")"
        : fmt(mine, info.kind)) + " (" + pct(100 * val(i) / total) + " of the model)";
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
