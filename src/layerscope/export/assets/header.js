  // ---- header ------------------------------------------------------------------------
  var body = document.body, M = D.model || {}, E = D.env || {};
  body.appendChild(el("h1", "", M.name || types[typ[0]] || "model"));
  var facts = [M["class"], M.device, M.dtype, M.training === undefined ? null : (M.training ? "train mode" : "eval mode"),
    N + " modules"].filter(function (x) { return x; });
  body.appendChild(el("div", "sub", facts.join(" \u00b7 ")));
  var cards = el("div", "cards");
  D.headline.forEach(function (h) {
    var c = el("div", "card"), v = typeof h[1] === "string" ? Number(h[1]) : h[1];
    c.appendChild(el("b", "", fmt(v, h[2])));
    c.appendChild(el("span", "", h[0]));
    c.title = (h[4] ? h[4] + ": " : "") + String(v);
    if (h[3]) c.dataset.key = h[3];
    cards.appendChild(c);
  });
  body.appendChild(cards);
