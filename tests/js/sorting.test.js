// The sorting rules (sorting.js) shared by the module table and the sections' tables.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { load } = require("./load.js");

const s = load(["sorting.js"]);
const indices = (n) => Array.from({ length: n }, (_, i) => i);

test("missing is null, undefined or NaN", () => {
  [null, undefined, NaN].forEach((x) => assert.equal(s.isMissing(x), true));
  [0, "", false, -1, Infinity].forEach((x) => assert.equal(s.isMissing(x), false));
});

test("a header click sorts one way, the next the other, the third not at all", () => {
  // a numeric column: largest first (-1), then smallest first, then none (-1 here)
  let state = s.nextSort(-1, -1, 2, -1, -1);
  assert.deepEqual(Array.from(state), [2, -1]);
  state = s.nextSort(state[0], state[1], 2, -1, -1);
  assert.deepEqual(Array.from(state), [2, 1]);
  state = s.nextSort(state[0], state[1], 2, -1, -1);
  assert.deepEqual(Array.from(state), [-1, 1]);
  // a text column starts smallest first; another column restarts the cycle
  assert.deepEqual(Array.from(s.nextSort(null, -1, "name", 1, null)), ["name", 1]);
  assert.deepEqual(Array.from(s.nextSort("name", 1, "flops", -1, null)), ["flops", -1]);
});

test("a section's table sorts by column, numbers given as strings too, missing last", () => {
  const rows = [[3], [null], ["10"], [1], [3]];
  // largest first: 10 (row 2), 3 (rows 0 and 4, in their order), 1 (row 3), then null
  assert.deepEqual(indices(5).sort(s.byColumn(rows, 0, -1)), [2, 0, 4, 3, 1]);
  assert.deepEqual(indices(5).sort(s.byColumn(rows, 0, 1)), [3, 0, 4, 2, 1]);
});

test("the module table sorts node values, missing last in tree order either way", () => {
  const values = [5, null, 7, NaN, 5, undefined];
  const collator = new Intl.Collator(undefined, { numeric: true });
  assert.deepEqual(indices(6).sort(s.byValue(values, false, -1, collator)), [2, 0, 4, 1, 3, 5]);
  assert.deepEqual(indices(6).sort(s.byValue(values, false, 1, collator)), [0, 4, 2, 1, 3, 5]);
});

test("text sorts with numbers read as numbers: layer2 before layer10", () => {
  const names = ["layer10", "layer2", "Layer1", null, "layer2"];
  const collator = new Intl.Collator(undefined, { numeric: true });
  assert.deepEqual(indices(5).sort(s.byValue(names, true, 1, collator)), [2, 1, 4, 0, 3]);
  assert.deepEqual(indices(5).sort(s.byValue(names, true, -1, collator)), [0, 1, 4, 2, 3]);
});
