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
      var next = nextSort(key, dir, k, cols[k][2] === "text" ? 1 : -1, -1);
      key = next[0]; dir = next[1];
      var order = trs.map(function (_, i) { return i; });
      if (key >= 0) order.sort(byColumn(rows, key, dir));
      Array.prototype.forEach.call(tr.children, function (h, j) {
        h.className = (cols[j][2] === "text" ? "txt " : "") + (j === key ? (dir > 0 ? "asc" : "desc") : "");
      });
      tb.replaceChildren.apply(tb, order.map(function (i) { return trs[i]; }));
    }
    t.appendChild(th); t.appendChild(tb); wrap.appendChild(t);
    sideCue(wrap, th);
    return wrap;
  }
  // Below a table wider than its box: how many columns lie past the right edge, kept
  // true as the box scrolls or resizes (a narrow window hides them with no other sign).
  // head: the table's <thead>, read afresh each time (its row may be rebuilt); returns
  // the update, for a caller that changes the columns.
  function sideCue(wrap, head) {
    var cue = el("div", "sidecue"); cue.hidden = true;
    function update() {
      if (!wrap.parentNode) return;
      if (!cue.parentNode) wrap.parentNode.insertBefore(cue, wrap.nextSibling);
      var edge = wrap.getBoundingClientRect().left + wrap.clientLeft + wrap.clientWidth + 1, n = 0;
      var cells = head.rows[0] ? head.rows[0].cells : [];
      Array.prototype.forEach.call(cells, function (h) { if (h.getBoundingClientRect().right > edge) n += 1; });
      cue.hidden = !n;
      cue.textContent = n ? n + (n > 1 ? " more columns" : " more column") + " to the right: scroll the table sideways \u2192" : "";
    }
    wrap.addEventListener("scroll", update);
    if (window.ResizeObserver) new ResizeObserver(update).observe(wrap);
    requestAnimationFrame(update);
    return update;
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
  function notesSection(section, notes, facts, ids, liClass, empty) {  // the notes, then the settings
    var nl = el("ul", "facts");
    notes.forEach(function (t) { nl.appendChild(el("li", liClass || "", t)); });
    if (!notes.length && empty) nl.appendChild(el("li", "", empty));
    section.appendChild(nl);
    section.appendChild(factList(facts, ids));
    return section;
  }
  function settle(root, nodes, draw) {  // placed first, drawn, redrawn on resize, then ready
    placeFirst([root].concat(nodes));
    draw();
    var timer = 0;
    window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(draw, 150); });
    root.dataset.ready = "1";
  }
  window.lsDom = {
    el: el, sv: sv, sortableTable: sortableTable, factList: factList, placeFirst: placeFirst,
    section: section, notesSection: notesSection, settle: settle
  };
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
  function section(title, id, what) {  // a section with its heading (and a note beside it)
    var s = el("section"); s.id = id;
    var h = el("div", "head"); h.appendChild(el("h2", "", title));
    if (what) h.appendChild(el("span", "note", what));
    s.appendChild(h);
    return s;
  }
