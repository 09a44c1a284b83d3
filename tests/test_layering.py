"""DESIGN's import rules ("Architecture"), checked on full dotted module names.

Every ``import`` in the package, at module level or inside a function, is read with ``ast``
and resolved to the module it loads (``from layerscope.render import units`` is
``layerscope.render.units``). ``if TYPE_CHECKING:`` imports do not run and are skipped.

The one exception is the display facade: a method of a data object (``Profile``, and what
analysis returns: the diff, the estimate, the rank summary) may import ``render/``,
``export/`` or ``layerscope.distributed`` lazily to show, render, export or gather itself.
Every other import counts, for the layer order and for circles alike.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "layerscope"

#: Lowest first. A module's layer is that of the longest prefix listed here.
LAYERS: dict[str, int] = {
    "layerscope.errors": 0,
    "layerscope.torchapi": 0,
    "layerscope.validate": 0,
    "layerscope.gcpause": 0,
    "layerscope.version": 0,
    "layerscope.hardware": 0,
    "layerscope.lazy": 0,
    "layerscope.busy": 0,
    "layerscope.metricspec": 1,
    "layerscope.profile": 1,
    "layerscope.collect": 2,
    "layerscope.metrics": 3,
    "layerscope.analysis": 4,
    "layerscope.render": 5,
    "layerscope.export": 5,
    "layerscope.session": 6,
    "layerscope.planning": 6,
    "layerscope.generation": 6,
    "layerscope.distributed": 6,
    "layerscope.integrations": 6,
    "layerscope.examples": 6,
    "layerscope.cli": 7,
    "layerscope": 8,  # the public facade (__init__) and __main__
    "layerscope.__main__": 8,
}

#: The data objects whose methods are display facades.
DATA_OBJECTS = frozenset(
    {
        "layerscope.profile.Profile",
        "layerscope.profile.Node",
        "layerscope.analysis.diff.ProfileDiff",
        "layerscope.analysis.roofline.Estimate",
        "layerscope.analysis.ranks.RankSummary",
    }
)

#: The declared plugs: a module of a lower or sibling package that reaches another one
#: by name (``importlib``), where an import would make a circle. The session reaches
#: the generation wing's recorder of a staged Profiler through one.
PLUGS: dict[str, str] = {"layerscope.session.staging.RECORDER": "layerscope.generation.recorder"}

#: What a display facade may import lazily.
FACADE_TARGETS = ("layerscope.render", "layerscope.export", "layerscope.distributed")

#: ``collect``'s observer interface: the only part of ``collect/`` that ``metrics/`` may use.
OBSERVER_INTERFACE = frozenset(
    {"layerscope.collect.observer", "layerscope.collect.signature", "layerscope.collect.tree"}
)


@dataclass(frozen=True)
class Edge:
    """One import: ``source`` loads ``target`` at ``line``; ``facade`` when it is a display
    facade's lazy import (a data object's method importing render, export or distributed)."""

    source: str
    target: str
    line: int
    facade: bool

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _layer_of(module: str) -> int:
    owner = max((p for p in LAYERS if _within(module, p)), key=len, default=None)
    assert owner is not None, f"{module}: add its layer to LAYERS"
    return LAYERS[owner]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = frozenset(_module_name(p) for p in PACKAGE.rglob("*.py"))


def _is_package(module: str) -> bool:
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()


def _resolve(source: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The modules one import statement loads: ``from a import b`` loads ``a.b`` when that
    is a module, else ``a`` (b is an attribute of it). A package's ``__init__`` runs before
    its submodules but does not depend on them, so it is no edge of its own."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names)
        return
    base = node.module or ""
    if node.level:
        package = source if _is_package(source) else source.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    for alias in node.names:
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def _is_type_checking(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and ast.unparse(stmt.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    )


def _visit(
    node: ast.AST, owner: str | None
) -> Iterator[tuple[ast.Import | ast.ImportFrom, str | None]]:
    """Every import at or below ``node`` that runs, with ``owner`` passed along."""
    if isinstance(node, ast.stmt) and _is_type_checking(node):
        return  # not imported at run time
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, owner
        return
    for child in ast.iter_child_nodes(node):
        yield from _visit(child, owner)


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str | None]]:
    """Every import in a module, with the module-level class whose method holds it (or None)."""
    for stmt in tree.body:
        if not isinstance(stmt, ast.ClassDef):
            yield from _visit(stmt, None)
            continue
        for item in stmt.body:
            method = isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from _visit(item, stmt.name if method else None)


def _module_level(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when a module is imported (not those in functions)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt) and _is_type_checking(child):
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield from _module_level(child)


def _eager() -> dict[str, set[str]]:
    """What each package's ``__init__`` imports when it runs: it runs before any of the
    package's modules is imported, so whoever imports one of them depends on these too."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("__init__.py")):
        package = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found[package] = {
            t
            for node in _module_level(tree)
            for t in _resolve(package, node)
            if _within(t, "layerscope") and t != package
        }
    return found


EAGER = _eager()


def _through_packages(source: str, target: str) -> set[str]:
    """What importing ``target`` from ``source`` runs besides ``target``: the eager
    imports of every package on the way down to it that does not hold ``source``."""
    parts = target.split(".")
    found: set[str] = set()
    for i in range(1, len(parts) + 1):
        package = ".".join(parts[:i])
        if package in EAGER and not _within(source, package):
            found |= EAGER[package]
    return found


def _edges() -> list[Edge]:
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, owner in _imports(tree):
            in_data_object = owner is not None and f"{source}.{owner}" in DATA_OBJECTS
            for target in _resolve(source, node):
                if _within(target, "layerscope") and target != source:
                    facade = in_data_object and any(_within(target, t) for t in FACADE_TARGETS)
                    edges.append(Edge(source, target, node.lineno, facade))
                    if not facade:
                        for also in sorted(_through_packages(source, target) - {source}):
                            edges.append(Edge(source, also, node.lineno, False))
    return edges


EDGES = _edges()


def _wrong(found: list[Edge], what: str) -> str:
    return what + ":\n" + "\n".join(str(e) for e in found)


def test_every_import_flows_down_the_layers_outside_display_facades() -> None:
    up = [e for e in EDGES if not e.facade and _layer_of(e.target) > _layer_of(e.source)]
    assert not up, _wrong(up, "imports that flow up the layers")


def test_views_and_exports_import_nothing_from_collect_metrics_session_or_cli() -> None:
    below = ("layerscope.collect", "layerscope.metrics", "layerscope.session", "layerscope.cli")
    wrong = [
        e
        for e in EDGES
        if any(_within(e.source, v) for v in ("layerscope.render", "layerscope.export"))
        and any(_within(e.target, b) for b in below)
    ]
    assert not wrong, _wrong(wrong, "views or exports reaching past the Profile")


def test_analysis_imports_nothing_from_collect_session_or_cli() -> None:
    banned = ("layerscope.collect", "layerscope.session", "layerscope.cli")
    wrong = [
        e
        for e in EDGES
        if _within(e.source, "layerscope.analysis") and any(_within(e.target, b) for b in banned)
    ]
    assert not wrong, _wrong(wrong, "analysis reaching the run")


def test_analysis_reaches_render_and_export_only_through_display_facades() -> None:
    wrong = [
        e
        for e in EDGES
        if _within(e.source, "layerscope.analysis")
        and any(_within(e.target, t) for t in ("layerscope.render", "layerscope.export"))
        and not e.facade
    ]
    assert not wrong, _wrong(wrong, "analysis importing views or exports outside a facade")


def test_metrics_use_only_the_observer_interface_of_collect() -> None:
    wrong = [
        e
        for e in EDGES
        if _within(e.source, "layerscope.metrics")
        and _within(e.target, "layerscope.collect")
        and e.target not in OBSERVER_INTERFACE
    ]
    assert not wrong, _wrong(wrong, "metrics using collect beyond its observer interface")


def test_profile_imports_no_layer_above_it_outside_display_facades() -> None:
    wrong = [
        e
        for e in EDGES
        if e.source == "layerscope.profile"
        and _layer_of(e.target) > _layer_of(e.source)
        and not e.facade
    ]
    assert not wrong, _wrong(wrong, "profile.py importing upper layers")


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles_counting_function_level_imports_outside_display_facades() -> None:
    graph: dict[str, set[str]] = {}
    for e in EDGES:
        if not e.facade:
            graph.setdefault(e.source, set()).add(e.target)
    circles = _circles(graph)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_display_facades_name_classes_that_exist() -> None:
    for name in DATA_OBJECTS:
        module, _, cls = name.rpartition(".")
        assert module in MODULES, name
        tree = ast.parse((PACKAGE.parent / (module.replace(".", "/") + ".py")).read_text())
        assert any(isinstance(s, ast.ClassDef) and s.name == cls for s in tree.body), name


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _layer_of(module)


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("layerscope.collect.scopes", "layerscope.metrics.flops", False),  # 2 -> 3
        ("layerscope.metrics.flop_counter", "layerscope.collect.observer", True),  # 3 -> 2
        ("layerscope.metrics.memory", "layerscope.session.profiler", False),  # 3 -> 6
        ("layerscope.session.profiler", "layerscope.metrics.memory", True),  # 6 -> 3
        ("layerscope.render.views", "layerscope.cli", False),  # 5 -> 7
        ("layerscope.profile", "layerscope.render.console", False),  # 1 -> 5
        ("layerscope.__main__", "layerscope.cli", True),  # 8 -> 7
    ],
)
def test_the_layer_order_itself(source: str, target: str, allowed: bool) -> None:
    assert (_layer_of(target) <= _layer_of(source)) is allowed


def test_version_matches_pyproject() -> None:
    import tomllib

    from layerscope.version import __version__

    pyproject = tomllib.loads((PACKAGE.parent.parent / "pyproject.toml").read_text())
    assert __version__ == pyproject["project"]["version"]


def test_render_and_export_import_each_other_one_way_only() -> None:
    """``export`` may use the text engines of ``render`` (units, layout, the summary
    lines); ``render`` imports nothing of ``export``, and neither imports a wing
    (``planning``, ``generation``): a wing's views and formats live in the wing."""
    wings = ("layerscope.planning", "layerscope.generation")
    wrong = [
        e
        for e in EDGES
        if (_within(e.source, "layerscope.render") and _within(e.target, "layerscope.export"))
        or (
            any(_within(e.source, v) for v in ("layerscope.render", "layerscope.export"))
            and any(_within(e.target, w) for w in wings)
        )
    ]
    assert not wrong, _wrong(wrong, "render importing export, or a view importing a wing")


def test_the_session_reaches_the_generation_wing_only_through_its_plug() -> None:
    wrong = [
        e
        for e in EDGES
        if _within(e.source, "layerscope.session") and _within(e.target, "layerscope.generation")
    ]
    assert not wrong, _wrong(wrong, "session importing the generation wing")
    named = [
        (path.name, const.value)
        for path in sorted((PACKAGE / "session").rglob("*.py"))
        for const in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(const, ast.Constant)
        and isinstance(const.value, str)
        and const.value.startswith("layerscope.generation")
    ]
    assert named == [("staging.py", PLUGS["layerscope.session.staging.RECORDER"])]
    import importlib

    owner, _, name = next(iter(PLUGS)).rpartition(".")
    plug = importlib.import_module(getattr(importlib.import_module(owner), name))
    assert callable(plug.Recorder) and callable(plug.default_rule)
