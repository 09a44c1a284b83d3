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
