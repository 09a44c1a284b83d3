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
  // A step line through (ops[k], by[k]); events that fall on one pixel column keep their
  // min, max and last.
  function stepPath(ops, by, sx, sy) {
    var d = "M" + sx(ops[0]).toFixed(1) + " " + sy(by[0]).toFixed(1), lastX = sx(ops[0]), k = 1, n = ops.length;
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
    return d;
  }
  function lastAtOrBefore(ops, o) {  // the last event at or before op o (ops ascending)
    var a = 0, b = ops.length - 1;
    while (a < b) { var m = (a + b + 1) >> 1; if (ops[m] <= o) a = m; else b = m - 1; }
    return a;
  }
  // The backward passes: [first event, the event that ends it (n if none)] of each run of
  // backward work. The timeline marks where a backward starts ("b") but not where it
  // ends, so a run ends at the first event that cannot be backward work: the end of the
  // run, a peak reached by another module than the one whose backward runs (its work
  // would have made a "b" event first), or an entry into a module that no backward op
  // follows at once (a forward; a recomputation under checkpointing runs backward ops).
  function bwRuns(ev, node, ops) {
    var runs = [], start = -1, owner = null, n = ev.length;
    for (var k = 0; k < n; k++) {
      var e = ev[k], ends = false;
      if (e === "b") {
        if (start < 0) start = k;
        owner = node[k];
      } else if (start < 0) {
        continue;
      } else if (e === "n" || (e === "p" && node[k] !== owner)) {
        ends = true;
      } else if (e === "e") {
        var j = k;
        while (j < n && ev[j] === "e") j++;
        ends = !(j < n && ev[j] === "b" && ops[j] === ops[k]);
      }
      if (ends) { runs.push([start, k]); start = -1; }
    }
    if (start >= 0) runs.push([start, n]);
    return runs;
  }
  function tlSay(by, peak, where, runs, bwRise, pc, bc) {  // the legend below the chart
    var say = ["Highest point: " + nbytes(by[peak]) + ", " + where +
      (pc && pc[1] === by[peak] ? " (the " + pc[0] + " card)." : ".")];
    if (pc && pc[1] > by[peak]) {
      say.push("The run's peak, " + nbytes(pc[1]) + " (" + pc[0] + "), fell between two samples.");
    }
    if (runs.length) {
      // the card's figure, the profile's (what the text view says); the line's own rise
      // where there is no card
      var rise = bc ? bc[1] : bwRise;
      say.push("Dashed: " + (runs.length === 1
        ? nbytes(by[runs[0][0]]) + " live when the backward started; the backward's highest point is " + nbytes(rise) + " above it"
        : "the live bytes when each of the " + runs.length + " backward passes started; the most a backward rose above its line is " +
          nbytes(rise)) + (bc ? " (the " + bc[0] + " card" +
        (bwRise < rise ? "; reached between two samples, so the line stays below it)." : ").") : "."));
    }
    return say.join(" ");
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
    var runs = bwRuns(ev, T.node, ops), bwRise = 0, inBw = false;
    runs.forEach(function (run) {  // shaded, with a dashed line at the level it started at
      // to where it ends; at the run's end (or past the events kept), to the line's end
      var x0 = sx(ops[run[0]]), x1 = run[1] < n && ev[run[1]] !== "n" ? sx(ops[run[1]]) : W - R, y0 = sy(by[run[0]]);
      for (var k1 = run[0]; k1 < run[1]; k1++) bwRise = Math.max(bwRise, by[k1] - by[run[0]]);
      if (peak >= run[0] && peak < run[1]) inBw = true;
      frag.appendChild(sv("rect", { "class": "tl-bw", x: x0, y: top, width: Math.max(x1 - x0, 0), height: ph }));
      frag.appendChild(sv("line", { "class": "tl-start", x1: x0, x2: x1, y1: y0, y2: y0 }));
    });
    if (runs.length) {
      var bt = sv("text", { x: sx(ops[runs[0][0]]), y: H - 8 });  // on the op axis
      bt.textContent = "backward \u2192"; axis.appendChild(bt);
    }
    var d = stepPath(ops, by, sx, sy) + "H" + (W - R);
    frag.appendChild(sv("path", { "class": "tl-area", d: d + "V" + sy(lo).toFixed(1) + "H" + L + "Z", opacity: 0.6 }));
    frag.appendChild(sv("path", { "class": "tl-line", d: d }));
    frag.appendChild(sv("circle", { "class": "tl-peak", cx: sx(ops[peak]), cy: sy(by[peak]), r: 3.5 }));
    var pc = card("session_peak_bytes"), bc = card("backward_peak_bytes");
    // after a backward (an optimizer step, code around the model): not the backward's
    var after = !inBw && runs.length && peak >= runs[0][1];
    var where = (inBw ? "backward of " : "") + tlName(peak) + (after ? ", after the backward" : "");
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
    tlLegend.textContent = tlSay(by, peak, (inBw ? "in the backward of " : "in ") + tlName(peak) +
      (after ? " after the backward" : ""), runs, bwRise, pc, bc);
    var row = Array.prototype.filter.call(axis.childNodes, function (t) {  // the op axis
      return t.tagName === "text" && +t.getAttribute("y") === H - 8;
    });
    if (row.length === 3) {  // "backward →" only where it meets neither end's label
      var b0 = row[0].getBBox(), b1 = row[1].getBBox(), b2 = row[2].getBBox();
      if (b2.x < b0.x + b0.width + 8 || b2.x + b2.width + 8 > b1.x) axis.removeChild(row[2]);
    }
    hit.addEventListener("mousemove", function (ev) {
      var box = tl.getBoundingClientRect(), o = (ev.clientX - box.left - L) / pw * maxOp;
      var a = lastAtOrBefore(ops, o), X = sx(ops[a]);
      guide.setAttribute("x1", X); guide.setAttribute("x2", X); guide.setAttribute("visibility", "visible");
      dot.setAttribute("cx", X); dot.setAttribute("cy", sy(by[a])); dot.setAttribute("visibility", "visible");
      // an event inside a backward pass says so ("backward" events say it already)
      var back = T.event[a] !== "b" && runs.some(function (r) { return a >= r[0] && a < r[1]; });
      tlTip.textContent = (T.event[a] === "n" ? EVENTS.n : (back ? "backward: " : "") + (EVENTS[T.event[a]] || "?") + " " +
        tlName(a)) + "\n" + nbytes(by[a]) + " live \u00b7 op " + count(ops[a]);
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
