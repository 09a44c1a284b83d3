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
  var cueUpdate = sideCue(wrap, thead);

  // Repainting replaces the rows and the header row, which drops the keyboard focus:
  // the focused toggle (by its row) or header (by its column key) gets it back.
  function focusedIn(box, sel, field) {
    var a = document.activeElement;
    return a && box.contains(a) && a.matches(sel) ? a.closest("[data-" + field + "]").dataset[field] : null;
  }
  function refocus(box, sel, field, value) {
    if (value === null) return;
    var t = box.querySelector("[data-" + field + '="' + value + '"]');
    t = t && (t.matches(sel) ? t : t.querySelector(sel));
    if (t && document.activeElement !== t) t.focus({ preventScroll: true });
  }

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
    var had = focusedIn(thead, "th", "key");
    thead.replaceChildren(tr);
    refocus(thead, "th", "key", had);
  }
  function sortValue(key) {
    if (key === "name") return names;
    if (key === "pct") return V[chartKey];
    return V[key];
  }
  var collator = new Intl.Collator(undefined, { numeric: true });
  function cmpFor(key, dir) {
    var text = key === "name" || key === "input_shape" || key === "output_shape";
    return byValue(sortValue(key), text, dir, collator);
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
      var x = V[c.key][i], none = c.key === "calls" && notCalled[i];  // as the text view: "-"
      var cell = el("td", c.kind === "text" ? "txt" : "", none ? "-" : fmt(x, c.kind));
      if (!none && x !== null && x !== undefined && c.kind !== "text") {
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
    var frag = document.createDocumentFragment(), had = focusedIn(tbody, ".tog", "i");
    frag.appendChild(spTop);  // (moving the rows into it drops the focus already)
    for (var k = first; k < last; k++) {
      var tr = rowOf(list[k]);
      tr.classList.toggle("hit", !!(found && found[list[k]]));
      frag.appendChild(tr);
      setGlyph(list[k]);
    }
    frag.appendChild(spBot);
    tbody.replaceChildren(frag);
    refocus(tbody, ".tog", "i", had);
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
    cueUpdate();
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
    var next = nextSort(sortKey, sortDir, key, key === "name" ? 1 : -1, null);  // third click: tree order
    sortKey = next[0]; sortDir = next[1];
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
