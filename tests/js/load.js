// Evaluates the report's asset files as they ship (src/layerscope/export/assets), in
// one context, as the page runs them: strict, in the order given, sharing one scope.
// The page wraps them in a function (export/html.py page_assets); here they run at the
// top of a script, so their functions and variables are the context's own, to test.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");

const ASSETS = path.join(__dirname, "..", "..", "src", "layerscope", "export", "assets");

// A document that hands the page its JSON (#ls-data) and nothing else.
function fakeDocument(data) {
  return {
    getElementById(id) {
      if (id === "ls-data") return { textContent: JSON.stringify(data) };
      throw new Error("no element #" + id + " in the fake document");
    },
  };
}

function load(files, data) {
  const context = { document: fakeDocument(data || {}), Intl, console };
  context.window = context;
  vm.createContext(context);
  const code = files.map((f) => fs.readFileSync(path.join(ASSETS, f), "utf8")).join("\n");
  vm.runInContext('"use strict";\n' + code, context, { filename: files.join("+") });
  return context;
}

module.exports = { load };
