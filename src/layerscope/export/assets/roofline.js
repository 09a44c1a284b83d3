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
  function textWidth(s) {  // of s in the chart's font, measured (else estimated)
    var t = sv("text", { "class": "halo" }), g0 = sv("g", { "class": "axis" });
    t.textContent = s; g0.appendChild(t); rl.appendChild(g0);
    var w = t.getComputedTextLength();
    rl.removeChild(g0);
    return w > 0 ? w : 6.2 * s.length;
  }
  // The five longest points named, each where its label meets no other label (placed:
  // [x, y, width] boxes) and no other point (circles: [cx, cy, r]), right of its point or
  // else left of it, inside the plot (box: [left, top, right]: clear of the axes' tick
  // labels and the svg's edges); a spot several modules share (a block's repeats) is
  // named once.
  function nameSpots(pts, placed, circles, box, at) {
    var labels = sv("g", { "class": "axis" }), named = 0, spots = {};
    function clear(lx, ly, wide, cx, cy) {
      for (var q = 0; q < placed.length; q++) {
        var o = placed[q];
        if (Math.abs(o[1] - ly) < 13 && lx < o[0] + o[2] + 8 && o[0] < lx + wide + 8) return false;
      }
      for (var k = 0; k < circles.length; k++) {
        var c = circles[k];
        if (Math.abs(c[0] - cx) < 0.5 && Math.abs(c[1] - cy) < 0.5) continue;  // its own spot
        var nx = Math.max(lx, Math.min(c[0], lx + wide)), ny = Math.max(ly - 10, Math.min(c[1], ly + 3));
        if ((nx - c[0]) * (nx - c[0]) + (ny - c[1]) * (ny - c[1]) < c[2] * c[2]) return false;
      }
      return true;
    }
    pts.forEach(function (p) {
      var xy = at(p), spot = xy[0].toFixed(0) + "," + xy[1].toFixed(0);
      if (named >= 5 || spots[spot]) return;
      var ly = xy[1] - 8, text = label(p.i), wide = textWidth(text);
      var right = xy[0] + 8, left = xy[0] - 8 - wide;
      var lx = right + wide <= box[2] && clear(right, ly, wide, xy[0], xy[1]) ? right :
        left >= box[0] && clear(left, ly, wide, xy[0], xy[1]) ? left : null;
      if (lx === null || ly - 11 < box[1]) return;
      placed.push([lx, ly, wide]); named++; spots[spot] = true;
      var lt = sv("text", { x: lx.toFixed(1), y: ly.toFixed(1), "class": "halo" });
      lt.textContent = text; labels.appendChild(lt);
    });
    return labels;
  }
  // The roof's two labels, inside the plot (from left to right, above bottom): its peak
  // above the flat roof, at the right; its ridge below the roof, right of the ridge, or
  // where that runs past the edge, against the edge and low enough to stay right of the
  // slope (slope: px down per px left), or else above the roof, left of the peak's label.
  // Each box goes to placed, for the point labels to keep clear of.
  function roofLabels(R, ridge, plot, sx, sy, slope, placed) {
    var left = plot[0], right = plot[1] - 4, bottom = plot[2], rg = sv("g", { "class": "axis" }), top = sy(R.peak);
    var peakText = R.name + " peak " + unit(R.peak, "FLOP/s"), pw0 = textWidth(peakText);
    var ridgeText = "ridge " + g(ridge, 3) + " FLOP/B", rw = textWidth(ridgeText);
    var rx = Math.min(sx(ridge) + 6, right - rw);
    // the box's top (baseline - 11) below where the slope meets its left edge, 3 px off
    var ry = Math.max(top + 14, top + slope * (sx(ridge) - rx + 3) + 2 + 11);
    if (ry + 3 > bottom) { rx = right - pw0 - 12 - rw; ry = top - 6; }
    function put(text, x, w) {
      if (x < left) return;  // no room for it in so narrow a plot
      var t = sv("text", { x: x.toFixed(1), y: (text === peakText ? top - 6 : ry).toFixed(1) });
      t.textContent = text; rg.appendChild(t);
      placed.push([x, +t.getAttribute("y"), w]);
    }
    put(peakText, right - pw0, pw0);
    put(ridgeText, rx, rw);
    return rg;
  }
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
      frag.appendChild(roofLabels(R, ridge, [L, L + pw, top + ph], sx, sy, (ph / (y1 - y0)) / (pw / (x1 - x0)), placed));
    }
    var wmax = 0;
    pts.forEach(function (p) { if (p.w > wmax) wmax = p.w; });
    pts.sort(function (a, b) { return b.w - a.w; });  // small ones on top
    var dots = sv("g", {}), circles = [];
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
      circles.push([sx(p.x), sy(p.y), r]);
    });
    frag.appendChild(dots);
    frag.appendChild(nameSpots(pts, placed, circles, [L, 0, L + pw], function (p) { return [sx(p.x), sy(p.y)]; }));
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
