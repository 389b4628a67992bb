"""The shape of the code: no import circles at any level, node code that travels alone, one
source for what the launcher and the runtime agree on."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import tfdist
from tfdist import contract

SRC = Path(tfdist.__file__).parent


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


def _packages(graph: dict[str, set[str]], depth: int = 2) -> dict[str, set[str]]:
    """The same graph between the packages and modules ``depth`` names deep (2:
    ``tfdist.jobs``, ``tfdist.cluster``; 3: ``tfdist.backends.spark``): an import inside one
    of them is no edge."""

    def top(module: str) -> str:
        return ".".join(module.split(".")[:depth])

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
    assert {"tfdist.backends", "tfdist.jobs", "tfdist.pyenv", "tfdist.jobspec"} <= set(packages)
    assert _cycle(packages) is None, " -> ".join(_cycle(packages) or [])


def test_the_circle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    modules = {"tfdist.a.x": {"tfdist.b.y"}, "tfdist.b.y": set(), "tfdist.b.z": {"tfdist.a.w"},
               "tfdist.a.w": set()}
    assert _cycle(modules) is None  # no circle between modules ...
    assert _cycle(_packages(modules)) == ["tfdist.a", "tfdist.b", "tfdist.a"]  # ... but between packages


def test_no_import_circle_at_any_package_level() -> None:
    """Sibling packages may form no circle either: backends.spark and backends.yarn imported
    each other (the agent, channel and workdir now sit in tfdist.node and backends.agent)."""
    graph = _graph()
    deepest = max(len(name.split(".")) for name in graph)
    for depth in range(2, deepest + 1):
        packages = _packages(graph, depth)
        assert _cycle(packages) is None, f"depth {depth}: " + " -> ".join(_cycle(packages) or [])


#: The modules outside tfdist.node that node code may import: both import the standard
#: library only (checked below), and the YARN container's zip carries them beside the package.
NODE_BASE = {"tfdist.contract", "tfdist.states"}


def test_node_code_imports_the_standard_library_and_itself_only() -> None:
    """What runs on a cluster node travels without an installed tfdist: its modules import the
    standard library, each other and the two base modules, nothing else of tfdist and no
    third-party package."""
    import sys

    graph = _graph()
    node = {name for name in graph if name == "tfdist.node" or name.startswith("tfdist.node.")}
    assert {"tfdist.node.agent", "tfdist.node.procs", "tfdist.node.yarn_container"} <= node
    outside = {name: sorted(m for m in graph[name] if m not in node and m not in NODE_BASE and m != "tfdist")
               for name in node}
    assert not {k: v for k, v in outside.items() if v}, outside
    assert not any(graph[name] for name in NODE_BASE), {n: graph[n] for n in NODE_BASE}
    third_party: dict[str, list[str]] = {}
    for name in node | NODE_BASE:
        path = SRC.parent / (name.replace(".", "/") + ("/__init__.py" if name == "tfdist.node" else ".py"))
        tops = set()
        for found in ast.walk(ast.parse(path.read_text())):
            if isinstance(found, ast.Import):
                tops.update(a.name.split(".")[0] for a in found.names)
            elif isinstance(found, ast.ImportFrom) and not found.level and found.module:
                tops.add(found.module.split(".")[0])
        if bad := sorted(tops - set(sys.stdlib_module_names) - {"tfdist", "__future__"}):
            third_party[name] = bad
    assert not third_party, third_party


def test_the_shipped_zip_is_the_node_package_whole() -> None:
    from tfdist.backends.agent import ship

    files = ship.shipped_files()
    on_disk = {f"tfdist/node/{p.name}" for p in (SRC / "node").glob("*.py")}
    assert on_disk <= set(files) and len(on_disk) >= 7
    assert {"tfdist/contract.py", "tfdist/states.py"} <= set(files)


def test_spec_and_runtime_take_strategies_and_defaults_from_the_contract() -> None:
    from tfdist.jobspec import model
    from tfdist.runtime import env

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
