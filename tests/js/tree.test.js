// The page's data (tree.js): the module tree rebuilt from pre-order depths, and the
// columns decoded; and the memory timeline's pure helpers (timeline.js).
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { load } = require("./load.js");

// page_number (export/html.py) writes non-finite floats as "NaN", "Infinity", "-Infinity".
// Net > enc > (fc, fc2), Net > head; head's path and id travel (they differ from the tree's)
const DATA = {
  depth: [0, 1, 2, 2, 1],
  name: ["", "enc", "fc", "fc2", "head"],
  types: ["Net", "Enc", "Linear"],
  type: [0, 1, 2, 2, 2],
  path: { 4: "lm_head" },
  id: { 4: "9" },
  inner: [0, 1],
  v: { calls: [1, 1, 2, 3, 1], flops: [100, "Infinity", 30, null, "NaN"], input_shape: ["a", "b", "c", "d", "e"] },
  s: { flops: [10, "-Infinity"] },
  derived: { flops_self: ["self", "flops"], flops_all: ["total", "flops"] },
  not_called: [3],
  timeline: null,
};
const t = load(["tree.js", "timeline.js"], DATA);
// arrays made in the page's context, as this realm's (deepStrictEqual compares prototypes)
const plain = (a) => Array.from(a, (x) => (x && typeof x === "object" ? plain(x) : x));

test("parents, children, paths and ids come from the depths", () => {
  assert.deepEqual(Array.from(t.parent), [-1, 0, 1, 1, 0]);
  assert.deepEqual(plain(t.kids.slice(0, 2)), [[1, 4], [2, 3]]);
  assert.deepEqual(plain(t.path), ["", "enc", "enc.fc", "enc.fc2", "lm_head"]);
  assert.deepEqual(plain(t.nid), ["0", "1", "1.1", "1.2", "9"]);
  assert.deepEqual([0, 2, 4].map((i) => t.describe(i)), ["<root> (Net)", "enc.fc (Linear)", "lm_head (Linear)"]);
});

test("non-finite values arrive as strings and are read back as numbers", () => {
  assert.deepEqual(plain(t.V.flops.slice(0, 4)), [100, Infinity, 30, null]);
  assert.ok(Number.isNaN(t.V.flops[4]));
  assert.deepEqual(plain(t.V.input_shape), ["a", "b", "c", "d", "e"]);  // shapes stay text
  assert.deepEqual(plain(t.S.flops), [10, -Infinity]);
});

test("derived columns are rebuilt: self values of inner nodes, totals as value x calls", () => {
  // inner nodes 0 and 1 take their self values; leaves are their own self
  assert.deepEqual(plain(t.V.flops_self.slice(0, 4)), [10, -Infinity, 30, null]);
  // 100 x 1, inf x 1, 30 x 2, null stays null
  assert.deepEqual(plain(t.V.flops_all.slice(0, 4)), [100, Infinity, 60, null]);
  assert.deepEqual(Array.from(t.notCalled), [0, 0, 0, 1, 0]);
});

test("the timeline's step line keeps min, max and last of events on one pixel", () => {
  const sx = (o) => 10 * o, sy = (b) => b;
  // four events on four columns: a plain step line
  assert.equal(t.stepPath([0, 1, 1.2, 3], [0, 10, 5, 7], sx, sy), "M0.0 0.0H10.0V10.0H12.0V5.0H30.0V7.0");
  // ops 1, 1.02, 1.04 fall on pixel 10: min 4, max 9, then the last, 6
  assert.equal(t.stepPath([0, 1, 1.02, 1.04, 2], [0, 4, 9, 6, 1], sx, sy), "M0.0 0.0H10.0V4.0V9.0V6.0H20.0V1.0");
});

test("the hover finds the last event at or before an op", () => {
  const ops = [0, 5, 5, 9];
  assert.deepEqual([-1, 0, 4.9, 5, 8, 9, 100].map((o) => t.lastAtOrBefore(ops, o)), [0, 0, 0, 2, 2, 3, 3]);
});
