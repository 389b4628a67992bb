"""The shape of the code: no import circles, small modules, one source for what the launcher
and the runtime agree on."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import tfdist
from tfdist import contract

SRC = Path(tfdist.__file__).parent
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """Modules of tfdist this one imports, at top level or inside functions alike
    (``from pkg import sub`` of a submodule imports ``sub``; ``pkg`` only for other names)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            subs = {f"{base}.{a.name}" for a in node.names} & modules
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(base)
    return {m for m in found if m.startswith("tfdist")}


def _graph() -> dict[str, set[str]]:
    """Every tfdist module (tfdist.runtime too) and the tfdist modules it imports."""
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    return {name: {m for m in _imports(path, name, set(modules)) if m in modules and m != name}
            for name, path in modules.items()}


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same graph between tfdist's top-level packages and modules (``tfdist.jobs``,
    ``tfdist.cluster``): an import inside one package is no edge."""

    def top(module: str) -> str:
        return ".".join(module.split(".")[:2])

    found: dict[str, set[str]] = {}
    for name, imported in graph.items():
        found.setdefault(top(name), set()).update(top(m) for m in imported if top(m) != top(name))
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == "tfdist":  # its __init__ imports tfdist.api only on attribute access
                continue
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle_among_tfdist_modules() -> None:
    graph = _graph()
    assert len(graph) > 30 and "tfdist.runtime.env" in graph  # the walk found the package
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_no_import_circle_among_tfdist_packages() -> None:
    """Modules may form no circle, and neither may the packages they sit in: backends ->
    pyenv -> jobs -> backends was one (the home directory and process start times now sit
    below all three, in tfdist.home and tfdist.pids)."""
    packages = _packages(_graph())
    assert {"tfdist.backends", "tfdist.jobs", "tfdist.pyenv", "tfdist.spec"} <= set(packages)
    assert _cycle(packages) is None, " -> ".join(_cycle(packages) or [])


def test_the_circle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    modules = {"tfdist.a.x": {"tfdist.b.y"}, "tfdist.b.y": set(), "tfdist.b.z": {"tfdist.a.w"},
               "tfdist.a.w": set()}
    assert _cycle(modules) is None  # no circle between modules ...
    assert _cycle(_packages(modules)) == ["tfdist.a", "tfdist.b", "tfdist.a"]  # ... but between packages


def test_no_module_over_500_lines() -> None:
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_spec_and_runtime_take_strategies_and_defaults_from_the_contract() -> None:
    from tfdist.runtime import env
    from tfdist.spec import model

    assert typing.get_args(model.Strategy) == contract.STRATEGIES
    assert model.StrategyOptions().dump() == contract.DEFAULT_OPTIONS
    assert env.parse_options(None) == contract.DEFAULT_OPTIONS


def _string_constants(path: Path) -> set[str]:
    """String literals in code, not in docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings}


def test_no_module_copies_a_contract_literal() -> None:
    """The env-var names and the progress prefix are written once, in contract.py. (Process
    code shipped to other machines by value, procs.py and ray/actor.py, cannot import tfdist
    and is exempt.)"""
    agreed = {*contract.TASK_ENV, contract.PROGRESS_PREFIX, contract.DONE_MARKER} - {contract.TF_CONFIG}
    exempt = {"contract.py", "procs.py", "actor.py"}
    copies = {str(p.relative_to(SRC)): sorted(_string_constants(p) & agreed)
              for p in SRC.rglob("*.py") if p.name not in exempt}
    assert not {k: v for k, v in copies.items() if v}, copies
