// The report's number formats (units.js): the strings the page shows, which are the
// console's (layerscope.render.units).
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { load } = require("./load.js");

const u = load(["units.js"]);

test("g is Python's format(x, '.<p>g')", () => {
  assert.equal(u.g(0, 3), "0");
  assert.equal(u.g(100, 3), "100");
  assert.equal(u.g(1.5, 6), "1.5");  // trailing zeros and point dropped: 1.50000
  assert.equal(u.g(1234.5678, 3), "1.23e+03");  // exponent 3 >= precision 3
  assert.equal(u.g(0.0001234, 3), "0.000123");  // exponent -4 keeps fixed notation
  assert.equal(u.g(0.00001234, 3), "1.23e-05");  // exponent -5 < -4, two exponent digits
  assert.equal(u.g(-2.5e20, 2), "-2.5e+20");
  assert.equal(u.g(Infinity, 3), "inf");
  assert.equal(u.g(-Infinity, 3), "-inf");
  assert.equal(u.g(NaN, 3), "nan");
});

test("count groups thousands; a fraction keeps two digits", () => {
  assert.equal(u.count(1234567), "1,234,567");
  assert.equal(u.count(-1234), "-1,234");
  assert.equal(u.count(999), "999");
  assert.equal(u.count(-1234.5), "-1,234.50");
});

test("bytes are binary, two decimals", () => {
  // 1234567 / 2**20 = 1.1773748...
  assert.equal(u.nbytes(1234567), "1.18 MiB");
  assert.equal(u.nbytes(1023), "1023 B");
  assert.equal(u.nbytes(1024), "1.00 KiB");
  assert.equal(u.nbytes(3 * Math.pow(2, 30)), "3.00 GiB");
  assert.equal(u.nbytes(1.5 * Math.pow(2, 40)), "1.50 TiB");
  assert.equal(u.nbytes(-2048), "-2.00 KiB");
  assert.equal(u.nbytes(12.7), "12 B");  // truncated, not rounded
});

test("si scales by 1000 with 3 significant digits", () => {
  assert.equal(u.si(1234567), "1.23 M");  // 1234567 / 1e6 = 1.234567
  assert.equal(u.si(1e12), "1 T");
  assert.equal(u.si(45600), "45.6 K");
  assert.equal(u.si(999), "999");  // below 1000: 6 significant digits, no unit
  assert.equal(u.si(0.125), "0.125");
});

test("seconds pick min, s, ms, \u00b5s or ns", () => {
  assert.equal(u.seconds(90), "1.5 min");  // 90 / 60
  assert.equal(u.seconds(2), "2 s");
  assert.equal(u.seconds(0.00123), "1.23 ms");
  assert.equal(u.seconds(4.56e-5), "45.6 \u00b5s");
  assert.equal(u.seconds(5e-10), "0.5 ns");  // 5e-10 / 1e-9
});

test("pct: one decimal, 100% near 100, two significant digits below 0.1", () => {
  assert.equal(u.pct(0), "0%");
  assert.equal(u.pct(99.96), "100%");  // within 0.05 of 100
  assert.equal(u.pct(99.9), "99.9%");
  assert.equal(u.pct(12.345), "12.3%");
  assert.equal(u.pct(0.05), "0.05%");
  assert.equal(u.pct(0.012345), "0.012%");
});

test("fmt by kind, empty for a missing value, and window.lsFormat is fmt", () => {
  assert.equal(u.window.lsFormat, u.fmt);
  assert.equal(u.fmt(null, "bytes"), "");
  assert.equal(u.fmt(undefined, "count"), "");
  assert.equal(u.fmt(Infinity, "bytes"), "inf");  // non-finite: as g, whatever the kind
  assert.equal(u.fmt(1234567, "bytes"), "1.18 MiB");
  assert.equal(u.fmt(1234567, "count"), "1,234,567");
  assert.equal(u.fmt(1234567, "rate"), "1.23 M");
  // a rate keeps 3 significant digits below 1000 too: not 230.436 tokens/s
  assert.equal(u.fmt(230.436, "rate"), "230");
  assert.equal(u.fmt(77.654, "rate"), "77.7");
  assert.equal(u.fmt(3.14159, "number"), "3.14");
  assert.equal(u.fmt("x", "text"), "x");
  assert.equal(u.fmt(5, "no such kind"), "5");
});

test("SI prefixes go on to P and E, as the console's", () => {
  assert.equal(u.si(1.23e15), "1.23 P");  // not 1.23e+03 T
  assert.equal(u.si(4.56e18), "4.56 E");
  assert.equal(u.si(999e12), "999 T");
});

test("small percentages keep 2 significant digits, never an exponent", () => {
  assert.equal(u.pct(7.6e-05), "0.000076%");  // not 7.6e-05%
  assert.equal(u.pct(0.042), "0.042%");
  assert.equal(u.pct(0.00027), "0.00027%");
  assert.equal(u.pct(-0.0042), "-0.0042%");
  assert.equal(u.pct(12.34), "12.3%");
});
