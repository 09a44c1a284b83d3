/* layerscope HTML report: the serving section (generation/serving_html.py). Reads
   #ls-serve-data and draws it first on the page, above the prefill's analysis. Numbers use
   the report's formats (window.lsFormat); every string reaches the DOM as textContent. */
  var S = JSON.parse(document.getElementById("ls-serve-data").textContent);
  var base = window.lsFormat, el = window.lsDom.el, sv = window.lsDom.sv;

  function num(x) { return typeof x === "string" ? Number(x) : x; }
  function fmt(x, kind) {
    if (kind === "text") return x === null || x === undefined ? "" : String(x);
    if (kind === "fits") return x === true ? "yes" : x === false ? "no" : "";
    x = num(x);
    if (x === null || x === undefined || isNaN(x)) return "";
    return base(x, kind);
  }
  var section = window.lsDom.section;

  // ---- title and the capacity --------------------------------------------------------
  var root = el("div"); root.id = "ls-serve";
  root.appendChild(el("h2", "sv-title", S.title));
  var cards = el("div", "cards"); cards.id = "ls-serve-cards";
  S.cards.forEach(function (c) {
    var d = el("div", "card");
    d.appendChild(el("b", "", fmt(c[1], c[2]))); d.appendChild(el("span", "", c[0]));
    d.title = c[3] + ": " + c[1];
    cards.appendChild(d);
  });
  root.appendChild(cards);

  // ---- the memory split: one bar over the usable memory -------------------------------
  var total = S.memory.reduce(function (a, p) { return a + num(p[1]); }, 0);
  var over = total - num(S.usable);
  var ms = section("Memory", "ls-serve-memory", "The GPU's usable memory (" + fmt(S.usable, "bytes") +
    "), as the server splits it; hover a part for its bytes." + (over > 0 ? " The parts are over " +
    "it by " + fmt(over, "bytes") + ": the bar spans them, and nothing is left for the KV cache." : ""));
  var bar = el("div", "sv-bar"), legend = el("div", "sv-legend");
  var usable = Math.max(num(S.usable), total) || 1;
  bar.id = "ls-serve-bar";
  S.memory.forEach(function (p, k) {
    var bytes = num(p[1]);
    var part = el("i", "sv-p" + k);
    part.style.width = (100 * bytes / usable) + "%";
    part.title = p[0] + ": " + fmt(bytes, "bytes") + " (" + p[1] + " B)";
    bar.appendChild(part);
    var s = el("span"); s.appendChild(el("i", "sv-p" + k));
    s.appendChild(document.createTextNode(p[0] + " ")); s.appendChild(el("b", "", fmt(bytes, "bytes")));
    legend.appendChild(s);
  });
  ms.appendChild(bar); ms.appendChild(legend);
  root.appendChild(ms);

  // ---- latency against throughput over the batch sizes -------------------------------
  var col = {};
  S.columns.forEach(function (c, k) { col[c[0]] = k; });
  var rs = section("Batches", "ls-serve-batches", "Time per output token against output tokens per " +
    "second, all sequences together, one point per batch size (its label), both predicted; " +
    "the table gives each row's roofline bound and launches too.");
  var svg = sv("svg", { id: "ls-serve-chart", role: "img", "aria-label": "time per output token against tokens per second" });
  svg.style.width = "100%"; svg.style.height = "250px";
  rs.appendChild(svg);
  // the y axis: log by default when the times span more than 10x (a batch at the maximum
  // concurrency would squash the small batches onto the 0 line), a toggle as the plan's bar has
  var tpots = S.rows.map(function (r) { return num(r[col.tpot]); }).filter(function (y) { return y > 0; });
  var spread = tpots.length ? Math.max.apply(null, tpots) / Math.min.apply(null, tpots) : 1;
  var yScale = spread > 10 ? "log" : "linear";
  if (tpots.length === S.rows.length && spread > 1) {  // a log axis needs every time above 0
    var seg = el("div", "seg"); seg.id = "ls-serve-scale";
    [["log", "Scale: log"], ["linear", "Scale: linear"]].forEach(function (s) {
      var b = el("button", s[0] === yScale ? "on" : "", s[1]);
      b.type = "button"; b.dataset.scale = s[0];
      b.setAttribute("aria-pressed", s[0] === yScale ? "true" : "false");
      b.addEventListener("click", function () {
        yScale = s[0];
        Array.prototype.forEach.call(seg.children, function (o) {
          o.className = o === b ? "on" : ""; o.setAttribute("aria-pressed", o === b ? "true" : "false");
        });
        draw();
      });
      seg.appendChild(b);
    });
    rs.firstChild.appendChild(seg);
  } else yScale = "linear";
  function yAxis(ys, T, H, B) {  // the y axis: its position function and its ticks
    if (yScale === "log") {
      var ly = Math.log10(Math.min.apply(null, ys)), hy = Math.log10(Math.max.apply(null, ys));
      var padY = 0.08 * (hy - ly || 1); ly -= padY; hy += padY;
      var ticks = [];
      for (var e = Math.ceil(ly); e <= hy; e++) ticks.push(Math.pow(10, e));
      if (ticks.length < 2) ticks = [Math.min.apply(null, ys), Math.max.apply(null, ys)];
      return { ticks: ticks, py: function (y) { return T + (H - T - B) * (1 - (Math.log10(y) - ly) / (hy - ly)); } };
    }
    var top = Math.max.apply(null, ys) * 1.1 || 1;
    return { ticks: [0, top / 2, top], py: function (y) { return T + (H - T - B) * (1 - y / top); } };
  }
  function draw() {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var W = Math.max(svg.clientWidth || 600, 300), H = 250, L = 70, R = 50, T = 22, B = 40;
    var xs = S.rows.map(function (r) { return num(r[col.tokens_per_s]); });
    var ys = S.rows.map(function (r) { return num(r[col.tpot]); });
    if (!xs.length) return;
    var lx = Math.log10(Math.min.apply(null, xs)), hx = Math.log10(Math.max.apply(null, xs));
    if (hx - lx < 1e-9) { lx -= 0.5; hx += 0.5; }
    var pad = 0.06 * (hx - lx); lx -= pad; hx += pad;  // the end points' labels clear the axis
    var axis = yAxis(ys, T, H, B), py = axis.py;
    function px(x) { return L + (W - L - R) * (Math.log10(x) - lx) / (hx - lx); }
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.dataset.scale = yScale;
    axis.ticks.forEach(function (v) {
      var y = py(v);
      svg.appendChild(sv("line", { x1: L, x2: W - R, y1: y, y2: y, "class": "sv-grid" }));
      var t = sv("text", { x: L - 6, y: y + 4, "text-anchor": "end", "class": "sv-axis" });
      t.textContent = fmt(v, "seconds"); svg.appendChild(t);
    });
    var yl = sv("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle", "class": "sv-axis",
      transform: "rotate(-90 12 " + (T + H - B) / 2 + ")" });
    yl.textContent = "per output token" + (yScale === "log" ? " (log scale)" : ""); svg.appendChild(yl);
    var lastLabel = null;  // a label that would overlap the one before it goes below its point
    var d = xs.map(function (x, i) { return (i ? "L" : "M") + px(x).toFixed(1) + " " + py(ys[i]).toFixed(1); }).join(" ");
    svg.appendChild(sv("path", { d: d, "class": "sv-line" }));
    xs.forEach(function (x, i) {
      var c = sv("circle", { cx: px(x), cy: py(ys[i]), r: 4, "class": "sv-pt" });
      var tip = sv("title", {}); tip.textContent = S.columns.map(function (c2, k) {
        return c2[1] + " " + fmt(S.rows[i][k], c2[2]);
      }).join("\n");
      c.appendChild(tip); svg.appendChild(c);
      var word = "batch " + S.rows[i][col.batch], wide = 6.5 * word.length + 8;
      var ty = py(ys[i]) - 8;
      if (lastLabel && px(x) - lastLabel[0] < (wide + lastLabel[2]) / 2 && Math.abs(ty - lastLabel[1]) < 14) {
        ty = py(ys[i]) + 17;
      }
      lastLabel = [px(x), ty, wide];
      var t = sv("text", { x: px(x), y: ty, "text-anchor": "middle", "class": "sv-label" });
      t.textContent = word; svg.appendChild(t);
      var a = sv("text", { x: px(x), y: H - B + 16, "text-anchor": "middle", "class": "sv-axis" });
      a.textContent = fmt(x, "rate"); svg.appendChild(a);
    });
    var xl = sv("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", "class": "sv-axis" });
    xl.textContent = "output tokens/s, all sequences (log scale)"; svg.appendChild(xl);
  }
  rs.appendChild(window.lsDom.sortableTable(S.columns, S.rows, "ls-serve-table", "sv-table", function (c, x) {
    var cls = c[2] === "text" ? "txt" : c[2] === "fits" ? (x === false ? "sv-no" : x === true ? "sv-yes" : "") : "";
    return [cls, fmt(x, c[2])];
  }));
  root.appendChild(rs);

  // ---- notes and the setting ------------------------------------------------------------
  root.appendChild(window.lsDom.notesSection(section("Serving notes", "ls-serve-notes"), S.notes, S.facts,
    "ls-serve-facts"));

  window.lsDom.settle(root, [el("h2", "sv-divider", "The prefill's profile"), el("div", "sub",
    "The prefill of the first batch, analysed on meta for the target, module by module.")], draw);
