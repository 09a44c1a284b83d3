  // The profile's data (#ls-data): the module tree and its columns, decoded.
  var D = JSON.parse(document.getElementById("ls-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";  // a namespace name, never fetched
  var N = D.depth.length;

  // ---- the tree ------------------------------------------------------------------
  var parent = new Int32Array(N), kids = new Array(N), path = new Array(N), nid = new Array(N);
  var depth = D.depth, names = D.name, types = D.types, typ = D.type;
  (function () {
    var stack = [];
    for (var i = 0; i < N; i++) {
      var d = depth[i], p = d ? stack[d - 1] : -1;
      stack[d] = i;
      parent[i] = p;
      if (p < 0) { path[i] = ""; nid[i] = "0"; }
      else {
        var ks = kids[p] || (kids[p] = []);
        ks.push(i);
        path[i] = path[p] ? path[p] + "." + names[i] : names[i];
        nid[i] = nid[p] === "0" ? String(ks.length) : nid[p] + "." + ks.length;
      }
      if (D.path[i] !== undefined) path[i] = D.path[i];
      if (D.id[i] !== undefined) nid[i] = D.id[i];
    }
  })();
  var V = D.v, S = {}, innerPos = new Int32Array(N).fill(-1);
  D.inner.forEach(function (i, k) { innerPos[i] = k; });
  Object.keys(V).forEach(function (key) {  // non-finite values travel as strings
    var a = V[key];
    if (key === "input_shape" || key === "output_shape") return;
    for (var i = 0; i < a.length; i++) if (typeof a[i] === "string") a[i] = Number(a[i]);
  });
  Object.keys(D.s).forEach(function (key) {
    S[key] = D.s[key].map(function (x) { return typeof x === "string" ? Number(x) : x; });
  });
  Object.keys(D.derived).forEach(function (key) {  // columns rebuilt here, not sent
    var how = D.derived[key], base = V[how[1]], out = new Array(N);
    if (how[0] === "self") {
      var own = S[how[1]];
      for (var i = 0; i < N; i++) out[i] = innerPos[i] >= 0 ? own[innerPos[i]] : base[i];
    } else {
      var calls = V.calls;
      for (var j = 0; j < N; j++) out[j] = base[j] === null ? null : base[j] * calls[j];
    }
    V[key] = out;
  });
  var notCalled = new Uint8Array(N);
  D.not_called.forEach(function (i) { notCalled[i] = 1; });
  function label(i) { return path[i] || names[i] || "<root>"; }
  function describe(i) {
    var t = types[typ[i]], l = label(i);
    return l === t ? l : l + " (" + t + ")";
  }
