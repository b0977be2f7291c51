"""The layer rules over the real import graph: data -> fl -> payloads <- attacks; metrics and report read results."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the installed package it becomes (pyproject's package-dir)
SOURCES = {"privbench": "privbench", "attacks": "privbench.attacks", "defenses": "privbench.defenses"}
PACKAGES = ("privbench",)


def _module_name(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    parts = SOURCES[folder].split(".") + rest
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    """Every module of the packages and the project modules it imports (lazily imported ones included)."""
    files = {_module_name(p): p for pkg in SOURCES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                if target.split(".")[0] in PACKAGES:
                    # importing a.b.c runs a, a.b and a.b.c: each package's __init__ is a dependency too
                    pieces = target.split(".")
                    deps |= {".".join(pieces[:i]) for i in range(1, len(pieces) + 1)} & set(files)
        graph[name] = deps - {name}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        for dep in graph.get(stack.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                stack.append(dep)
    return seen


GRAPH = _graph()


def _modules(prefix: str) -> list[str]:
    return sorted(m for m in GRAPH if m == prefix or m.startswith(prefix + "."))


RULES = [
    ("privbench.attacks", "privbench.fl"),
    ("privbench.attacks", "privbench.data"),
    ("privbench.payloads", "privbench.fl"),
    ("privbench.payloads", "privbench.data"),
    ("privbench.metrics", "privbench.attacks"),
    ("privbench.metrics", "privbench.fl"),
    ("privbench.data", "privbench.fl"),
    ("privbench.report", "privbench.fl"),
    ("privbench.report", "privbench.attacks"),
]


@pytest.mark.parametrize("source, forbidden", RULES)
def test_layer_rule(source, forbidden):
    assert _modules(source), f"no module under {source}"
    offenders = {m: sorted(d for d in _reachable(GRAPH, m) if d == forbidden or d.startswith(forbidden + "."))
                 for m in _modules(source)}
    offenders = {m: d for m, d in offenders.items() if d}
    assert not offenders, f"{source} must not import {forbidden}: {offenders}"


def test_the_graph_sees_lazy_imports():
    # privbench.cli imports the audit inside a function; the graph must still see it.
    assert "privbench.audit.run" in _reachable(GRAPH, "privbench.cli")
    assert "privbench.pixels" in GRAPH["privbench.attacks.projection"] and "privbench.pixels" in GRAPH["privbench.data.dataset"]
