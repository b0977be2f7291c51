"""The layer rules over the real import graph: data -> fl -> payloads <- attacks; metrics and report read results."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the installed package it is
SOURCES = {"privbench": "privbench"}
PACKAGES = ("privbench",)


def _module_name(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    parts = SOURCES[folder].split(".") + rest
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph(*, parents: bool = True) -> dict[str, set[str]]:
    """Every module of the packages and the project modules it imports (lazily imported ones and those under
    ``TYPE_CHECKING`` included). With ``parents``, importing ``a.b.c`` also depends on ``a`` and ``a.b`` (their
    ``__init__`` runs first); without, only on the modules named, which is what a cycle is made of."""
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
                    named = {".".join(pieces[:i]) for i in range(1, len(pieces) + 1)} if parents else {target}
                    deps |= named & set(files)
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
IMPORTS = _graph(parents=False)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_cycles():
    cycles = _cycles(IMPORTS)
    assert not cycles, f"import cycles (function-level and TYPE_CHECKING imports included): {cycles}"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


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
    ("privbench.report", "privbench.audit"),
    ("privbench.fl", "privbench.audit"),
    ("privbench.fl", "privbench.flower"),
    ("privbench.fl", "privbench.attacks"),
    ("privbench.fl", "privbench.defenses"),
    ("privbench.attacks", "privbench.audit"),
    ("privbench.defenses", "privbench.audit"),
    ("privbench.payloads", "privbench.audit"),
    # the Flower engine adapter sits below the audit; its apps (client_app, server_app) above it
    *[(f"privbench.flower.{m}", "privbench.audit") for m in ("engine", "capture", "codec", "launch", "simulation")],
    # auditing a user's Flower app is an entry point over the attacks and defences: nothing below it imports it
    *[(layer, "privbench.app_audit") for layer in ("privbench.audit", "privbench.attacks", "privbench.defenses",
                                                    "privbench.fl", "privbench.flower", "privbench.payloads")],
]
#: Modules a user or a tool starts (``python -m``, the Python API, Flower's app references).
ENTRY_POINTS = {"privbench.__main__", "privbench.cli", "privbench.api", "privbench.attack", "privbench.report.__main__",
                "privbench.rescore", "privbench.app_audit.__main__",
                "privbench.flower.client_app", "privbench.flower.server_app"}


@pytest.mark.parametrize("source, forbidden", RULES)
def test_layer_rule(source, forbidden):
    assert _modules(source), f"no module under {source}"
    offenders = {m: sorted(d for d in _reachable(GRAPH, m) if d == forbidden or d.startswith(forbidden + "."))
                 for m in _modules(source)}
    offenders = {m: d for m, d in offenders.items() if d}
    assert not offenders, f"{source} must not import {forbidden}: {offenders}"


def test_only_genefl_uses_genefl_s_room():
    """GENE-FL's names (the learnGene, the Fisher-elastic penalty) stay in ``fl/genefl``; shared machinery
    (clustering, layers, the Fisher read, the trainer's generic penalty) lives outside it."""
    users = {m for m, deps in IMPORTS.items() if any(d.startswith("privbench.fl.genefl") for d in deps)}
    assert users <= {"privbench.fl.protocols.genefl", *_modules("privbench.fl.genefl")}, sorted(users)


def test_entry_points_are_imported_by_no_module_of_the_package():
    importers = {m: sorted(e for e in IMPORTS[m] if e in ENTRY_POINTS) for m in IMPORTS}
    # ``python -m privbench`` is a two-line shim over the CLI
    importers = {m: e for m, e in importers.items() if e and not (m == "privbench.__main__" and e == ["privbench.cli"])}
    assert not importers, f"entry points imported inside the package: {importers}"
    assert ENTRY_POINTS <= set(IMPORTS), sorted(ENTRY_POINTS - set(IMPORTS))


def test_the_graph_sees_lazy_imports():
    # privbench.cli imports the audit inside a function; the graph must still see it.
    assert "privbench.audit.run" in _reachable(GRAPH, "privbench.cli")
    assert "privbench.pixels" in GRAPH["privbench.attacks.reconstruction.projection"] and "privbench.pixels" in GRAPH["privbench.data.dataset"]


#: The audit's core: planning, the run, the attack phase, scoring and output. It names no attack family.
AUDIT_CORE = ("privbench.audit.run", "privbench.audit.plan", "privbench.audit.attack_phase", "privbench.audit.score",
              "privbench.audit.output", "privbench.audit.summary")
#: The attack families' folders and the games' modules (the registry, ``privbench.audit.games``, is not a family).
FAMILIES = ("privbench.attacks.reconstruction", "privbench.attacks.labels", "privbench.attacks.property",
            "privbench.attacks.membership", "privbench.attacks.one_run", "privbench.attacks.active",
            "privbench.audit.games.")


def _names_a_family(module: str) -> list[str]:
    return sorted(d for d in _reachable(GRAPH, module)
                  if any(d == f or d.startswith(f if f.endswith(".") else f + ".") for f in FAMILIES))


def test_the_audit_core_names_no_family():
    """A family is its folder under attacks/ and its game under audit/games/: the core reaches neither (it asks the
    game registry, which finds the games by discovery, and the scorer registry)."""
    offenders = {m: _names_a_family(m) for m in AUDIT_CORE}
    assert not {m: d for m, d in offenders.items() if d}, offenders


def test_every_family_has_a_folder_with_a_readme():
    attacks = Path(__file__).resolve().parents[1] / "privbench" / "attacks"
    for family in FAMILIES[:-1]:
        folder = attacks / family.rsplit(".", 1)[1]
        assert (folder / "__init__.py").is_file() and (folder / "README.md").is_file(), folder
    assert _names_a_family("privbench.audit.games.membership")  # the rule's check sees a family when there is one
