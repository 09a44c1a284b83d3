  // The report's number formats, the console's (layerscope.render.units); plan.js and
  // generation.js use them through window.lsFormat.
  function strip(s) {
    return s.indexOf(".") < 0 ? s : s.replace(/0+$/, "").replace(/\.$/, "");
  }
  function fixed(x, d) {  // Python's format(x, ".<d>f"): an exact tie rounds to even
    // the value's exact decimal digits (toFixed writes them exactly): a tie is 5, then 0s
    var exact = Math.abs(x).toFixed(Math.min(100, d + 40)), dot = exact.indexOf(".");
    var kept = exact.slice(0, d ? dot + d + 1 : dot), rest = exact.slice(dot + d + 1);
    if (/^50*$/.test(rest) && "02468".indexOf(kept.slice(-1)) >= 0) {
      return (x < 0 ? "-" : "") + kept;  // toFixed takes a tie up; Python to the even digit
    }
    return x.toFixed(d);
  }
  function g(x, p) {  // Python's format(x, ".<p>g")
    if (x === 0) return "0";
    if (!isFinite(x)) return x > 0 ? "inf" : x < 0 ? "-inf" : "nan";
    var ex = x.toExponential(p - 1), e = parseInt(ex.split("e")[1], 10);
    if (e < -4 || e >= p) {
      var parts = ex.split("e"), d = parts[1].slice(1);
      return strip(parts[0]) + "e" + parts[1][0] + (d.length < 2 ? "0" + d : d);
    }
    return strip(fixed(x, Math.max(0, p - 1 - e)));
  }
  function small(p) {  // 2 significant digits, never an exponent: 0.000076
    return strip(fixed(p, Math.max(0, 1 - Math.floor(Math.log10(Math.abs(p))))));
  }
  function group(s) { return s.replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  function count(n) {
    if (Number.isInteger(n)) return (n < 0 ? "-" : "") + group(String(Math.abs(n)));
    var s = fixed(Math.abs(n), 2).split(".");
    return (n < 0 ? "-" : "") + group(s[0]) + "." + s[1];
  }
  var SI = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "K"]];
  var BIN = [[Math.pow(2, 40), "TiB"], [Math.pow(2, 30), "GiB"], [Math.pow(2, 20), "MiB"], [1024, "KiB"]];
  var SEC = [[60, "min"], [1, "s"], [1e-3, "ms"], [1e-6, "\u00b5s"]];
  function reaches(n, scale, shown, smallest) {
    // at least 1 of the unit, or rounded up to it from a unit that would print 1000 or
    // more (999,999 is "1 M", not "1e+03 K"); below the smallest unit values print exactly
    if (Math.abs(n) >= scale) return true;
    return scale > smallest && parseFloat(shown(Math.abs(n) / scale)) >= 1;
  }
  function g3(x) { return g(x, 3); }
  function f2(x) { return x.toFixed(2); }
  function si(n) {
    for (var k = 0; k < SI.length; k++) if (reaches(n, SI[k][0], g3, 1e3)) return g(n / SI[k][0], 3) + " " + SI[k][1];
    return g(n, 6);
  }
  function nbytes(n) {
    for (var k = 0; k < BIN.length; k++) if (reaches(n, BIN[k][0], f2, 1024)) return fixed(n / BIN[k][0], 2) + " " + BIN[k][1];
    return Math.trunc(n) + " B";
  }
  function seconds(t) {
    for (var k = 0; k < SEC.length; k++) if (reaches(t, SEC[k][0], g3, 0)) return g(t / SEC[k][0], 3) + " " + SEC[k][1];
    return g(t / 1e-9, 3) + " ns";
  }
  function pct(p) {
    if (p === 0) return "0%";
    if (Math.abs(p - 100) < 0.05) return "100%";
    if (Math.abs(p) >= 0.1) return fixed(p, 1) + "%";
    return small(p) + "%";
  }
  function rate(n) {  // per second, 3 significant digits at any size: 689, 77.7, 1.98 K
    return Math.abs(n) < 1000 ? g(n, 3) : si(n);
  }
  var FORMATS = {
    count: count, si: si, bytes: nbytes, seconds: seconds, rate: rate, pct: pct,
    number: function (x) { return g(x, 3); }, text: String
  };
  function fmt(x, kind) {
    if (x === null || x === undefined) return "";
    if (typeof x === "number" && !isFinite(x)) return g(x, 3);
    return (FORMATS[kind] || String)(x);
  }
  window.lsFormat = fmt;  // for tests: the same formats as the console
