"""Each idea in one small module: no module of the package over 300 lines, no function over 60."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "privbench"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 60


def _long_functions(source: str) -> list[tuple[str, int]]:
    """Functions (methods and nested ones included) of ``source`` over ``MAX_FUNCTION_LINES``, decorators aside."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def test_no_module_over_300_lines_and_no_function_over_60():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 150
    long_modules = {str(p.relative_to(PACKAGE)): n for p in modules
                    if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    long_functions = {f"{p.relative_to(PACKAGE)}:{name}": n for p in modules
                      for name, n in _long_functions(p.read_text())}
    assert not long_modules and not long_functions, (long_modules, long_functions)


def test_the_check_sees_a_long_function_and_a_nested_one():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert _long_functions(f"def long():\n{body}") == [("long", MAX_FUNCTION_LINES + 1)]
    nested = "class A:\n    def outer(self):\n        def inner():\n" + body.replace("    ", "            ")
    assert {name for name, _ in _long_functions(nested)} == {"outer", "inner"}
    assert _long_functions(f"def short():\n{body[: -len(body.splitlines()[-1]) - 1]}") == []
