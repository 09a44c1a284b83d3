  // ---- sorting rules -------------------------------------------------------------------
  // Shared by the module table (table.js) and the sections' tables (dom.js's
  // sortableTable): a header click sorts one way, a second the other, a third not at all.
  function isMissing(x) { return x === null || x === undefined || x !== x; }
  function nextSort(key, dir, k, first, none) {  // [key, dir] after a click on column k
    if (key !== k) return [k, first];
    if (dir === first) return [key, -dir];
    return [none, dir];
  }
  function byColumn(rows, key, dir) {  // row indices by rows[i][key], strings read as numbers
    function num(x) { return typeof x === "string" ? Number(x) : x; }
    return function (a, b) {
      var u = num(rows[a][key]), w = num(rows[b][key]);
      if (u === w) return a - b;
      if (isMissing(u)) return 1;
      if (isMissing(w)) return -1;
      return (u < w ? -1 : 1) * dir;
    };
  }
  function byValue(values, text, dir, collator) {  // node indices by values[i]
    return function (x, y) {
      var u = values[x], w = values[y], nu = isMissing(u), nw = isMissing(w);
      if (nu || nw) return nu === nw ? x - y : nu ? 1 : -1;  // missing values last
      if (text) { var c = collator.compare(String(u), String(w)); return c ? c * dir : x - y; }
      return u === w ? x - y : (u < w ? -dir : dir);
    };
  }
