/* layerscope HTML report: the plan section (planning/html.py). Reads #ls-plan-data and
   draws it first on the page, above the analysis the plan was computed from. Numbers use
   the report's formats (window.lsFormat); every string reaches the DOM as textContent. */
  var P = JSON.parse(document.getElementById("ls-plan-data").textContent);
  var base = window.lsFormat;

  function num(x) { return typeof x === "string" ? Number(x) : x; }
  function fmt(x, kind) {
    x = num(x);
    if (x === null || x === undefined) return "";
    if (kind === "ratio") return base(100 * x, "pct");
    if (kind === "flag") return x ? "\u2713" : "";
    if (kind === "fits") return x === true ? "yes" : x === false ? "no" : "";
    return base(x, kind);
  }
  function nbytes(x) { return fmt(x, "bytes"); }
  function pctOf(x, whole) { return whole > 0 ? base(100 * x / whole, "pct") : ""; }
  var el = window.lsDom.el, sv = window.lsDom.sv;
  var section = window.lsDom.section;
  function swatch(cls, label, value, note) {  // one legend entry
    var s = el("span");
    if (cls) s.appendChild(el("i", cls));
    s.appendChild(document.createTextNode(label + " "));
    if (value !== undefined) s.appendChild(el("b", "", value));
    if (note) s.appendChild(el("span", "note", note));
    return s;
  }

  // ---- title, options and cards ------------------------------------------------------
  var root = el("div"); root.id = "ls-plan";
  var O = P.options || {}, DV = P.device || {};
  root.appendChild(el("h2", "pl-title", "Training plan"));
  var shownRow = P.sweep && P.sweep.shown !== null && P.sweep.shown !== undefined ? P.sweep.shown : null;
  if (shownRow !== null) {  // a sweep's report: which row this plan is, as the terminal says it
    var named = el("div", "sub pl-shown-row", "Shown: " + P.sweep.shown_said + "; its row is marked \u25c0 in " +
      "the Sweep table below.");
    named.id = "ls-plan-row";
    root.appendChild(named);
  }
  var said = [
    (DV.label || O.target || "") + (O.world_size ? " \u00d7 " + O.world_size : ""),
    O.sharding, O.mesh && O.mesh.tp > 1 ? "tensor parallel " + O.mesh.tp +
      (O.sequence_parallel ? " (sequence parallel)" : "") : null,
    O.mesh && O.mesh.cp > 1 ? "context parallel " + O.mesh.cp : null,
    O.mesh && O.mesh.ep > 1 ? "expert parallel " + O.mesh.ep : null,
    O.mesh && O.mesh.pp > 1 ? "pipeline " + O.mesh.pp + " (" + O.schedule + ", " + O.microbatches +
      " microbatches)" : null,
    O.precision, O.optimizer,
    O.grad_accum > 1 ? "grad accum " + O.grad_accum : null,
    O.loss && O.loss !== "plain" ? "loss " + O.loss : null,
    O.compile ? "compiled" : null, O.float8 ? "float8 linears" : null,
    P.checkpointing
  ].filter(function (x) { return x; });
  root.appendChild(el("div", "sub", "Per GPU" + (O.rank ? " (rank " + O.rank + ")" : "") + ": " + said.join(" \u00b7 ")));
  var cards = el("div", "cards"); cards.id = "ls-plan-cards";
  function card(label, value, what, cls) {
    var c = el("div", "card" + (cls ? " " + cls : ""));
    c.appendChild(el("b", "", value)); c.appendChild(el("span", "", label));
    c.title = what;
    cards.appendChild(c);
  }
  var L = P.labels;  // the cards' names, from the plan's field table
  card(L.peak_bytes, nbytes(P.peak_bytes), "the highest point of the step's memory timeline (" +
    P.peak_at.phase + ": " + P.peak_at.label + "): " + P.peak_bytes + " B");
  if (P.budget !== null) {
    card(L.budget, nbytes(P.budget), "the memory the step must fit in, " + P.budget + " B; " +
      nbytes(P.reserve_bytes) + " of it kept in reserve");
    var fits = P.headroom_bytes >= 0;
    card(fits ? L.headroom_bytes : "Over budget", nbytes(Math.abs(P.headroom_bytes)),
      "budget \u2212 reserve \u2212 peak = " + P.headroom_bytes + " B: " + (fits ? "it fits" : "it does not fit"),
      fits ? "pl-good" : "pl-bad");
  }
  var bounded = P.step_time_bound !== null && P.step_time_bound !== undefined;
  card(L.step_time, fmt(P.step_time, "seconds"), (bounded ? "predicted from achievable rates (" + P.rates +
    "), see the notes: " : "a lower bound (see the notes): ") + P.step_time + " s");
  if (bounded) card(L.step_time_bound, fmt(P.step_time_bound, "seconds"),
    "the roofline lower bound: " + P.step_time_bound + " s");
  if (P.mfu !== null) card(L.mfu, fmt(P.mfu, "ratio"), bounded ? "model FLOPs utilisation, 6 N per token + " +
    "attention (PaLM's convention): " + P.mfu : "model FLOPs utilisation, an upper bound: " + P.mfu);
  if (bounded && P.mfu_counted !== null) card(L.mfu_counted, fmt(P.mfu_counted, "ratio"),
    "the analysis's FLOPs over the predicted step at the peak: " + P.mfu_counted);
  if (P.tokens_per_s !== null) card(L.tokens_per_s, fmt(P.tokens_per_s, "rate"), fmt(P.tokens, "count") + " tokens per step: " + fmt(P.tokens_per_s, "rate") + " tokens/s" +
    (bounded && P.tokens_per_s_bound !== null ? ", at most " + fmt(P.tokens_per_s_bound, "rate") : ""));
  root.appendChild(cards);

  // ---- memory at the peak: a stacked bar ---------------------------------------------
  var names = P.part_names, peak = P.peak_bytes, budget = P.budget, reserve = P.reserve_bytes;
  var ps = section("Memory at the peak", "ls-plan-peak",
    "Per GPU, by part, at the step's highest point (" + P.peak_at.phase + ": " + P.peak_at.label + ").");
  var scale = budget !== null && (peak + reserve) / budget >= 0.05 ? "budget" : "peak";
  var barBox = el("div", "pl-barbox"), bar = el("div", "pl-bar"), scaleNote = el("div", "note");
  bar.id = "ls-plan-bar";
  barBox.appendChild(bar);
  if (budget !== null && budget > peak) {  // else both scales are the peak's
    var seg = el("div", "seg"); seg.id = "ls-plan-scale";
    [["peak", "Scale: the peak"], ["budget", "Scale: the budget"]].forEach(function (s) {
      var b = el("button", s[0] === scale ? "on" : "", s[1]);
      b.type = "button"; b.dataset.scale = s[0];
      b.addEventListener("click", function () { scale = s[0]; drawBar(); });
      seg.appendChild(b);
    });
    ps.firstChild.appendChild(seg);
  }
  ps.appendChild(barBox);
  var legend = el("div", "pl-legend"); legend.id = "ls-plan-parts";
  P.parts.forEach(function (p) {
    legend.appendChild(swatch("pl-p" + p[0], names[p[0]], nbytes(p[1]), pctOf(p[1], peak)));
  });
  legend.appendChild(swatch("", "= peak", nbytes(peak)));
  ps.appendChild(legend);
  if (budget !== null) {
    var bl = el("div", "pl-legend"); bl.id = "ls-plan-limits";
    bl.appendChild(swatch("pl-line", "budget", nbytes(budget)));
    bl.appendChild(swatch("pl-hatch", "reserve", nbytes(reserve)));
    bl.appendChild(swatch("", P.headroom_bytes >= 0 ? "headroom" : "over by", nbytes(Math.abs(P.headroom_bytes)),
      P.headroom_bytes >= 0 ? "(budget \u2212 reserve \u2212 peak)" : "(peak + reserve \u2212 budget)"));
    ps.appendChild(bl);
  }
  ps.appendChild(scaleNote);
  function drawBar() {
    var whole = scale === "budget" ? Math.max(peak, budget) : peak || 1;
    bar.dataset.scale = String(whole);
    bar.replaceChildren();
    P.parts.forEach(function (p) {
      var s = el("i", "pl-p" + p[0]);
      s.style.width = (100 * p[1] / whole) + "%";
      s.dataset.part = String(p[0]); s.dataset.bytes = String(p[1]);
      s.title = names[p[0]] + ": " + nbytes(p[1]) + " (" + pctOf(p[1], peak) + " of the peak), " + p[1] + " B";
      bar.appendChild(s);
    });
    Array.prototype.forEach.call(barBox.querySelectorAll(".pl-mark, .pl-reserve"), function (m) { m.remove(); });
    var seg2 = document.getElementById("ls-plan-scale");
    if (seg2) Array.prototype.forEach.call(seg2.children, function (b) {
      b.className = b.dataset.scale === scale ? "on" : "";
      b.setAttribute("aria-pressed", b.dataset.scale === scale ? "true" : "false");
    });
    if (budget === null) { scaleNote.textContent = "No budget given."; return; }
    if (budget > whole) {
      scaleNote.textContent = "Budget " + nbytes(budget) + " and reserve " + nbytes(reserve) +
        " lie beyond this scale: the peak is " + pctOf(peak, budget) + " of the budget.";
      return;
    }
    scaleNote.textContent = "";
    var at = 100 * budget / whole, from = 100 * Math.max(budget - reserve, 0) / whole;
    if (reserve > 0) {
      var r = el("div", "pl-reserve"); r.id = "ls-plan-reserve";
      r.style.left = from + "%"; r.style.width = (at - from) + "%";
      r.title = "reserve: " + nbytes(reserve) + ", kept free below the budget";
      barBox.appendChild(r);
    }
    var m = el("div", "pl-mark " + (at > 50 ? "pl-right" : "pl-left")); m.id = "ls-plan-budget";
    m.style.left = "calc(" + at + "% - 1px)";
    m.appendChild(el("span", "", "budget " + nbytes(budget)));
    m.title = "budget: " + budget + " B";
    barBox.appendChild(m);
  }
  drawBar();
  root.appendChild(ps);

  // ---- memory over the step: stacked areas over the timeline's points ----------------
  var T = P.timeline, n = T.total.length;
  var PHASE_CLASS = { forward: "pl-fw", backward: "pl-bw", optimizer: "pl-opt" };
  var tsec = section("Memory over one step", "ls-plan-memory",
    "Per GPU, stacked by part, at each of the step's " + n + " points in order (x: the point, not time). " +
    "Hover for the event and the module.");
  var tl = sv("svg", { id: "ls-plan-timeline", role: "img", "aria-label": "memory per GPU over one training step" });
  var plot = el("div", "plot"), tip = el("div", "tip");
  plot.appendChild(tl); plot.appendChild(tip); tsec.appendChild(plot);
  var tlLegend = el("div", "pl-legend");
  T.parts.forEach(function (p) { tlLegend.appendChild(swatch("pl-p" + p[0] + " pl-band", names[p[0]])); });
  T.phases.forEach(function (r) {
    if (r[0] !== "forward" && !tlLegend.querySelector("." + PHASE_CLASS[r[0]])) {
      tlLegend.appendChild(swatch((PHASE_CLASS[r[0]] || "") + " pl-band", r[0]));
    }
  });
  tsec.appendChild(tlLegend);
  root.appendChild(tsec);
  function phaseAt(k) {
    for (var j = 0; j < T.phases.length; j++) if (k < T.phases[j][2]) return T.phases[j][0];
    return "";
  }
  function drawTimeline() {
    if (!n) { tl.replaceChildren(); return; }
    var W = Math.max(tl.clientWidth || tl.parentNode.clientWidth, 300), H = 250;
    var L = 76, R = 14, top = 42, B = 22, pw = W - L - R, ph = H - top - B, k;
    var pk = 0;
    for (k = 0; k < n; k++) if (T.total[k] > T.total[pk]) pk = k;
    var hi = Math.max(T.total[pk], 1);
    var limit = budget !== null ? budget - reserve : null, showLimit = limit !== null && limit > 0 && limit <= hi * 1.25;
    if (showLimit) hi = Math.max(hi, limit);
    function sx(i) { return L + (n > 1 ? pw * i / (n - 1) : pw / 2); }
    function sy(b) { return top + ph * (1 - b / hi); }
    var frag = document.createDocumentFragment(), axis = sv("g", { "class": "axis" }), half = n > 1 ? pw / (n - 1) / 2 : pw / 2;
    T.phases.forEach(function (r) {
      var x0 = Math.max(L, sx(r[1]) - half), x1 = Math.min(L + pw, sx(r[2] - 1) + half);
      frag.appendChild(sv("rect", { "class": PHASE_CLASS[r[0]] || "pl-fw", x: x0, y: top, width: Math.max(x1 - x0, 1), height: ph, "data-phase": r[0] }));
      var t = sv("text", { "class": "pl-phase", x: x0 + 4, y: 12 });
      t.textContent = r[0];
      t.dataset.width = String(x1 - x0);
      axis.appendChild(t);
    });
    [0, T.total[pk] / 2, T.total[pk]].forEach(function (b) {
      axis.appendChild(sv("line", { x1: L, x2: W - R, y1: sy(b), y2: sy(b) }));
      var t = sv("text", { x: L - 6, y: sy(b) + 4, "text-anchor": "end" });
      t.textContent = nbytes(b); axis.appendChild(t);
    });
    [[0, "start", "point 1"], [n - 1, "end", "point " + n]].forEach(function (p) {
      if (p[0] === 0 && n === 1 && p[1] === "end") return;
      var t = sv("text", { x: sx(p[0]), y: H - 6, "text-anchor": n > 1 ? p[1] : "middle" });
      t.textContent = p[2]; axis.appendChild(t);
    });
    frag.appendChild(axis);
    var low = new Array(n).fill(0);
    T.parts.forEach(function (p) {
      var v = p[1], up = "", down = "";
      for (k = 0; k < n; k++) up += (k ? "L" : "M") + sx(k).toFixed(1) + " " + sy(low[k] + v[k]).toFixed(1);
      for (k = n - 1; k >= 0; k--) down += "L" + sx(k).toFixed(1) + " " + sy(low[k]).toFixed(1);
      frag.appendChild(sv("path", { "class": "pl-area pl-p" + p[0], d: up + down + "Z", "data-part": p[0] }));
      for (k = 0; k < n; k++) low[k] += v[k];
    });
    var d = "";
    for (k = 0; k < n; k++) d += (k ? "L" : "M") + sx(k).toFixed(1) + " " + sy(T.total[k]).toFixed(1);
    var line = sv("path", { "class": "pl-total", d: d, "data-points": n });
    line.id = "ls-plan-total";
    frag.appendChild(line);
    if (showLimit) {
      frag.appendChild(sv("line", { "class": "pl-budget", x1: L, x2: W - R, y1: sy(limit), y2: sy(limit) }));
      var bt = sv("text", { "class": "pl-budget-text", x: W - R - 4, y: sy(limit) - 5, "text-anchor": "end" });
      bt.textContent = "budget \u2212 reserve " + nbytes(limit); frag.appendChild(bt);
    }
    var labels = sv("g", { "class": "axis" }), pt = sv("text", { "class": "halo", y: sy(T.total[pk]) - 8 });
    pt.id = "ls-plan-peak-label";
    labels.appendChild(pt);
    frag.appendChild(sv("circle", { "class": "tl-peak", cx: sx(pk), cy: sy(T.total[pk]), r: 3.5 }));
    frag.appendChild(labels);
    var guide = sv("line", { "class": "tl-guide", y1: top, y2: top + ph, visibility: "hidden" });
    var dot = sv("circle", { "class": "tl-dot", r: 3.5, visibility: "hidden" });
    var hit = sv("rect", { x: L, y: top, width: pw, height: ph, fill: "transparent" });
    frag.appendChild(guide); frag.appendChild(dot); frag.appendChild(hit);
    tl.replaceChildren(frag);
    tl.setAttribute("height", H);
    tl.setAttribute("viewBox", "0 0 " + W + " " + H);
    // phase names only where their band has room; the legend names the bands' colours
    Array.prototype.forEach.call(axis.querySelectorAll(".pl-phase"), function (t) {
      if (t.getComputedTextLength() + 8 > +t.dataset.width) axis.removeChild(t);
    });
    var where = T.labels[T.at[pk]], lead = "highest " + nbytes(T.total[pk]) + " \u00b7 " + phaseAt(pk) + ": ";
    pt.textContent = lead + where;
    for (var cut = where.length; pt.getComputedTextLength() > pw && cut > 1; cut--) {
      pt.textContent = lead + where.slice(0, cut - 1) + "\u2026";
    }
    var tw = pt.getComputedTextLength();
    pt.setAttribute("x", Math.max(L, Math.min(sx(pk) - tw / 2, W - R - tw)).toFixed(1));
    hit.addEventListener("mousemove", function (ev) {
      var box = tl.getBoundingClientRect();
      var i = n > 1 ? Math.round((ev.clientX - box.left - L) / pw * (n - 1)) : 0;
      i = Math.max(0, Math.min(n - 1, i));
      var X = sx(i);
      guide.setAttribute("x1", X); guide.setAttribute("x2", X); guide.setAttribute("visibility", "visible");
      dot.setAttribute("cx", X); dot.setAttribute("cy", sy(T.total[i])); dot.setAttribute("visibility", "visible");
      var lines = ["point " + (i + 1) + " of " + n + " \u00b7 " + phaseAt(i) + ": " + T.labels[T.at[i]],
        nbytes(T.total[i]) + " in all"];
      T.parts.forEach(function (p) { if (p[1][i]) lines.push(names[p[0]] + " " + nbytes(p[1][i])); });
      tip.textContent = lines.join("\n");
      tip.style.display = "block";
      tip.style.left = Math.max(0, Math.min(ev.clientX - box.left + 12, W - 280)) + "px";
      tip.style.top = Math.max(sy(T.total[i]) - 20, 0) + "px";
    });
    hit.addEventListener("mouseleave", function () {
      guide.setAttribute("visibility", "hidden"); dot.setAttribute("visibility", "hidden");
      tip.style.display = "none";
    });
  }

  // ---- step time by part -------------------------------------------------------------
  var step = num(P.step_time), sum = 0;
  P.time.forEach(function (t) { sum += num(t[1]) || 0; });
  var ss = section("Step time", "ls-plan-time", P.time_bound ? "Predicted: each kernel at its achievable rate " +
    "plus a launch cost, collectives at NCCL's rates, perfect overlap where the model allows it; the " +
    "roofline lower bound is " + fmt(P.step_time_bound, "seconds") + " (" + P.time_bound.map(function (t) {
      return t[0] + " " + fmt(t[1], "seconds"); }).join(", ") + ")." :
    "A lower bound: each module at its roofline, collectives at " +
    "NCCL's rates, perfect overlap where the model allows it.");
  var tb = el("div", "pl-bar"), twhole = Math.max(step || 0, sum) || 1;
  tb.id = "ls-plan-timebar"; tb.dataset.scale = String(twhole);
  var tlg = el("div", "pl-legend");
  P.time.forEach(function (t, k) {
    var s = num(t[1]) || 0;
    if (!s) return;
    var i = el("i", "pl-t" + k);
    i.style.width = (100 * s / twhole) + "%";
    i.title = t[0] + ": " + fmt(s, "seconds") + " (" + pctOf(s, twhole) + "), " + s + " s";
    tb.appendChild(i);
    tlg.appendChild(swatch("pl-t" + k, t[0], fmt(s, "seconds"), pctOf(s, twhole)));
  });
  tlg.appendChild(swatch("", "= step", fmt(step, "seconds")));
  var bb = el("div", "pl-barbox"); bb.style.paddingTop = "4px"; bb.appendChild(tb);
  ss.appendChild(bb); ss.appendChild(tlg);
  var facts = [];
  if (num(P.comm_time)) {
    var exposed = num(P.exposed_comm) || 0, comm = num(P.comm_time), hidden = comm - exposed;
    facts.push("Collectives: " + fmt(comm, "seconds") + " in all, " + fmt(exposed, "seconds") + " of it exposed; " +
      (hidden > 0 ? "the rest (" + pctOf(hidden, comm) + ") overlaps compute." : "none of it overlaps compute."));
  }
  facts.push("Model FLOPs per step: " + fmt(P.model_flops, "si") + (P.mfu !== null ? "; MFU " + fmt(P.mfu, "ratio") +
    " of " + (DV.label || O.target || "the device") + "'s peak " +
    (P.time_bound ? "(6 N per token + attention)" : "(an upper bound)") : "") + "." +
    (P.tokens ? " " + fmt(P.tokens, "count") + " tokens per step, " + fmt(P.tokens_per_s, "rate") + " tokens/s." : ""));
  if (P.checkpoint.length) {
    var cp = P.checkpoint, many = cp.length > 4;  // a long list: its ends, and how many
    facts.push("Checkpointed: " + (many ? cp.slice(0, 2).join(", ") + ", \u2026, " + cp[cp.length - 1] + " (" +
      fmt(cp.length, "count") + " modules)" : cp.join(", ")) + "; activations kept " + nbytes(P.kept_activation_bytes) +
      ", " + fmt(P.recompute_flops, "si") + " FLOPs recomputed.");
  }
  var ful = el("ul", "facts");
  facts.forEach(function (f) { ful.appendChild(el("li", "", f)); });
  ss.appendChild(ful);
  if (P.comm.length) {
    ss.appendChild(table(P.comm_columns, P.comm, "ls-plan-comm"));
  }
  root.appendChild(ss);

  // ---- tables: the stages, the modules, the sweep ------------------------------------------------
  function table(cols, rows, id) {
    return window.lsDom.sortableTable(cols, rows, id, "pl-table", function (c, x) {
      var cls = c[2] === "text" ? "txt" + (c[0] === "path" ? " pl-path" : "") : "";
      if (c[2] === "fits") cls = x === false ? "pl-no" : x === true ? "pl-yes" : "";
      return [cls, c[2] === "text" ? (x === null ? "" : String(x)) : fmt(x, c[2])];
    });
  }
  if (P.stages) {
    var st = section("Pipeline stages", "ls-plan-stages", P.stages.said);
    st.appendChild(table(P.stages.columns, P.stages.rows, "ls-plan-stages-table"));
    root.appendChild(st);
  }
  var M = P.modules;
  if (M.rows.length) {
    var ms = section("Plan per module", "ls-plan-modules", "One row per FSDP unit or checkpointed module; hover a " +
      "header for what it counts, a cell for the raw value.");
    ms.appendChild(table(M.columns, M.rows, "ls-plan-table"));
    root.appendChild(ms);
  }
  if (P.sweep) {
    var sw = section("Sweep", "ls-plan-sweep", P.sweep.rows.length + " plans, one per combination of the options swept." +
      (P.sweep.same.length ? " Every row: " + P.sweep.same.map(function (s) { return s[0] + " " + s[1]; }).join(", ") + "." : ""));
    var swt = table(P.sweep.columns, P.sweep.rows, "ls-plan-sweep-table");
    var shownTr = shownRow === null ? null : swt.querySelector("tbody").children[shownRow];
    if (shownTr) {  // before any sort: the rows in order; a sort moves the row, mark and all
      shownTr.className = "pl-shown";
      shownTr.title = "Shown above: " + P.sweep.shown_said;
      shownTr.firstChild.appendChild(el("span", "pl-shown-mark", "\u25c0 shown above"));
    }
    sw.appendChild(swt);
    root.appendChild(sw);
  }

  // ---- notes and options -------------------------------------------------------------
  root.appendChild(window.lsDom.notesSection(section("Plan notes", "ls-plan-notes"), P.notes, P.settings,
    "ls-plan-settings"));

  // ---- placed first, above the analysis ----------------------------------------------
  window.lsDom.settle(root, [el("h2", "pl-divider", "The analysis behind the plan"), el("div", "sub",
    "The profile of one micro-batch the plan's figures are computed from.")], drawTimeline);
