"""Imports flow one way, down DESIGN's pipeline; no import circles.

Every ``import`` in the package, at module level or inside a function, is read with
``ast``. A module may import only from its own layer or a lower one. The one exception is the
data model's convenience methods (``prof.save``, ``print(prof)``, ``prof.gather``, and
``ProfileDiff``'s ``show``), which import the layers above lazily, inside the method, so
the data model itself never depends on them at import time. ``if TYPE_CHECKING:`` imports
are not imports at run time and are not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "layerscope"

#: Lowest first. A module's layer is its first dotted component below ``layerscope``.
LAYERS: dict[str, int] = {
    "errors": 0,
    "gcpause": 0,
    "version": 0,
    "hardware": 0,
    "torchapi": 0,
    "profile": 1,
    "collect": 2,
    "metrics": 3,
    "analysis": 4,
    "render": 5,
    "export": 5,
    "session": 6,
    "distributed": 6,
    "integrations": 6,
    "examples": 6,
    "cli": 7,
    "__init__": 8,
    "__main__": 8,
}


#: Modules holding a data model whose methods may import upper layers lazily.
DATA_MODELS = frozenset(
    {"layerscope.profile", "layerscope.analysis.diff", "layerscope.analysis.roofline"}
)


def _layer_of(module: str) -> int:
    parts = module.split(".")
    assert parts[0] == "layerscope", module
    key = parts[1] if len(parts) > 1 else "__init__"
    assert key in LAYERS, f"{module}: add its layer to LAYERS"
    return LAYERS[key]


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1 and parts != ["layerscope", "__init__"]:
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every layerscope import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    top_level = {id(stmt) for stmt in tree.body}
    for stmt in tree.body:
        if isinstance(stmt, ast.If):
            if ast.unparse(stmt.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                typing_only.update(id(n) for n in ast.walk(stmt))  # not imported at run time
            else:
                top_level.update(id(n) for n in stmt.body)
    found: list[tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            if name == "layerscope" or name.startswith("layerscope."):
                found.append((name, node.lineno, id(node) in top_level))
    return found


def _edges() -> list[tuple[str, str, int, bool]]:
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _module_name(path)
        for target, line, top in _imports(path):
            edges.append((source, target, line, top))
    return edges


def test_every_import_flows_down() -> None:
    wrong = []
    for source, target, line, top in _edges():
        if _layer_of(target) <= _layer_of(source):
            continue
        if source in DATA_MODELS and not top:
            continue  # the data model's convenience methods, imported lazily
        wrong.append(f"{source}:{line} imports {target}")
    assert not wrong, "imports that flow up the layers:\n" + "\n".join(wrong)


def test_metrics_use_only_the_observer_interface_of_collect() -> None:
    """``metrics/`` may use ``collect/``'s observer interface, never a session."""
    wrong = [
        f"{source}:{line} imports {target}"
        for source, target, line, _ in _edges()
        if source.startswith("layerscope.metrics") and target.startswith("layerscope.session")
    ]
    assert not wrong


def test_no_module_level_import_circles() -> None:
    graph: dict[str, set[str]] = {}
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    for source, target, _, top in _edges():
        if not top:
            continue
        # `from layerscope.a import b` may name a submodule b or an attribute of a
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        graph.setdefault(source, set()).add(target)
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1 and nxt != node:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    # a package importing its own submodules from __init__ is not a circle of layers
    cycles = [c for c in cycles if not all(m.startswith(c[0] + ".") or m == c[0] for m in c)]
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("layerscope.collect.scopes", "layerscope.metrics.flops", False),  # 2 -> 3
        ("layerscope.metrics.flop_counter", "layerscope.collect.observer", True),  # 3 -> 2
        ("layerscope.metrics.memory", "layerscope.session.profiler", False),  # 3 -> 6
        ("layerscope.session.profiler", "layerscope.metrics.memory", True),  # 6 -> 3
        ("layerscope.render.views", "layerscope.cli", False),  # 5 -> 7
    ],
)
def test_the_rule_itself(source: str, target: str, allowed: bool) -> None:
    assert (_layer_of(target) <= _layer_of(source)) is allowed


def test_version_matches_pyproject() -> None:
    import tomllib

    from layerscope.version import __version__

    pyproject = tomllib.loads((PACKAGE.parent.parent / "pyproject.toml").read_text())
    assert __version__ == pyproject["project"]["version"]
