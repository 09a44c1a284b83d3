"""The package's size limits (docs/architecture.md): no function body over 100 lines but
argparse declaration builders, and no file over 600 lines but the FLOP-formula families
and the ported kernel-choice rules; the same limits for the HTML report's JS and CSS
assets. Ruff checks complexity (C901, PLR0915)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "layerscope"
MAX_BODY = 100
MAX_FILE = 600
#: Functions that only declare a parser's arguments: a list of ``add_argument`` calls.
ARGPARSE_BUILDERS = {"cli/profile_cmd.py": {"add_arguments"}}
#: Files allowed past MAX_FILE: one family of FLOP formulas, or kernel-choice rules ported
#: from torch (kept in torch's order so they can be compared line by line).
LONG_FILES = {"metrics/flops/attention.py", "collect/target/sdpa.py"}


def _sources() -> list[tuple[str, str]]:
    return [
        (path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_no_function_body_over_100_lines() -> None:
    long: list[str] = []
    for rel, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            assert node.end_lineno is not None
            body = node.end_lineno - node.body[0].lineno + 1
            if body > MAX_BODY and node.name not in ARGPARSE_BUILDERS.get(rel, ()):
                long.append(f"{rel}:{node.lineno} {node.name} ({body} lines)")
    assert long == []


def test_no_file_over_600_lines_but_formula_families_and_ported_rules() -> None:
    sizes = {rel: text.count("\n") for rel, text in _sources()}
    assert {rel for rel, n in sizes.items() if n > MAX_FILE} <= LONG_FILES


def test_the_named_exceptions_exist() -> None:
    """An exception that no longer needs its place is taken off the list."""
    sizes = {rel: text.count("\n") for rel, text in _sources()}
    assert all(sizes[rel] > MAX_FILE for rel in LONG_FILES)
    for rel, names in ARGPARSE_BUILDERS.items():
        tree = ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert names <= defined


ASSETS = PACKAGE / "export" / "assets"
#: A regular expression literal may follow these (else ``/`` divides).
_REGEX_AFTER = set("(,=:[!&|?{};+-*%<>~^")
_JS_FUNCTION = re.compile(r"\bfunction\b\s*[\w$]*\s*\([^)]*\)\s*\{|=>\s*\{")


def _js_code(text: str) -> str:
    """``text`` with its comments, strings and regular expressions blanked (their line
    breaks kept), so that the braces left are the code's."""
    out: list[str] = []
    i, prev = 0, ""
    while i < len(text):
        if text.startswith("//", i) or text.startswith("/*", i):
            end = text.find("\n", i) if text[i + 1] == "/" else text.find("*/", i) + 2
            end = len(text) if end < 0 else end
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        c = text[i]
        if c in "'\"`" or (c == "/" and prev in _REGEX_AFTER | {""}):
            j = i + 1
            while text[j] != c:
                if c == "/" and text[j] == "[":  # a class: [^/] does not end the literal
                    j = text.index("]", j + 1)
                j += 2 if text[j] == "\\" else 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1 : j]) + c)
            i, prev = j + 1, "x"
            continue
        out.append(c)
        prev = prev if c.isspace() else c
        i += 1
    return "".join(out)


def _js_functions(text: str) -> list[tuple[int, int]]:
    """(line, body lines) of every ``function (...) {`` and ``=> {`` in ``text``: the
    lines after its opening brace's, to its closing brace's."""
    code, found = _js_code(text), []
    for match in _JS_FUNCTION.finditer(code):
        depth, at = 0, match.end() - 1
        for end in range(at, len(code)):
            depth += {"{": 1, "}": -1}.get(code[end], 0)
            if depth == 0:
                break
        line = code.count("\n", 0, at) + 1
        found.append((line, code.count("\n", at, end)))
    return found


def _assets() -> list[tuple[str, str]]:
    return [
        (path.name, path.read_text(encoding="utf-8"))
        for path in sorted(ASSETS.iterdir())
        if path.suffix in (".js", ".css")
    ]


def test_no_asset_over_600_lines() -> None:
    assert {name: text.count("\n") for name, text in _assets() if text.count("\n") > MAX_FILE} == {}


def test_no_js_function_body_over_100_lines() -> None:
    long = [
        f"{name}:{line} ({body} lines)"
        for name, text in _assets()
        if name.endswith(".js")
        for line, body in _js_functions(text)
        if body > MAX_BODY
    ]
    assert long == []


def test_the_js_scan_sees_through_strings_comments_and_regexes() -> None:
    """Braces in strings, comments and regular expressions are not the code's; nested
    functions are counted each on their own."""
    text = (
        "function f(a) {\n"  # 1
        '  var s = "}", t = /[}/]{2}/g, u = a / 2 / 3; // }\n'  # 2
        "  /* } */ [1].map((x) => {\n"  # 3
        "    return `}`;\n"  # 4
        "  });\n"  # 5
        "}\n"  # 6
    )
    # f: from line 1 to line 6, 5 lines; the arrow function: line 3 to 5, 2 lines
    assert _js_functions(text) == [(1, 5), (3, 2)]
    assert _js_functions(_LONG) == [(1, 101)]


_LONG = "function long() {\n" + "  x();\n" * 100 + "}\n"
