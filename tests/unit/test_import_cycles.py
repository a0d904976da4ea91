"""No import cycle among sparkbake's modules, nor among the image's scripts (images/*.py).

Every import counts: at the top, inside a function, and under `if TYPE_CHECKING:`; so does
a script's `_sibling("name")`, which loads images/name.py. The modules are read with `ast`,
none of them imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
Graph = dict[str, set[str]]


def module_names(root: Path, package: str | None) -> dict[str, Path]:
    """Each module's name -> its file: a package's modules under root (`package.a.b`), or
    the scripts of a folder by their file's stem (package None)."""
    if package is None:
        return {path.stem: path for path in sorted(root.glob("*.py"))}
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of known that the module name (in path) imports, loads or names."""
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here.split(".")[:len(here.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "_sibling" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            yield node.args[0].value


def graph(known: dict[str, Path]) -> Graph:
    return {name: {target for target in imported(name, path, known)
                   if target in known and target != name}
            for name, path in known.items()}


def strongly_connected(edges: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def a_cycle(edges: Graph, component: list[str]) -> list[str]:
    """One cycle through the component's first module: the shortest way back to it."""
    start, members = component[0], set(component)
    ways = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(edges[node] & members):
            if target == start:
                return [*ways[node], start]
            if target not in ways:
                ways[target] = [*ways[node], target]
                queue.append(target)
    return component


def cycles(edges: Graph) -> list[str]:
    """Each cycle, one per strongly connected component, with the component's other
    modules where it has more."""
    found = []
    for component in strongly_connected(edges):
        cycle = a_cycle(edges, component)
        more = sorted(set(component) - set(cycle))
        found.append(" -> ".join(cycle) + (f" (and with them: {', '.join(more)})" if more
                                            else ""))
    return found


def test_sparkbake_s_modules_import_each_other_in_no_cycle() -> None:
    edges = graph(module_names(ROOT / "src" / "sparkbake", "sparkbake"))
    assert "sparkbake.publish.record" in edges["sparkbake.publish.push"]  # the graph is read
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_the_image_s_scripts_import_each_other_in_no_cycle() -> None:
    edges = graph(module_names(ROOT / "images", None))
    assert "smoke_common" in edges["smoke_check"] and "preflight" in edges["entrypoint"]
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_an_import_under_type_checking_or_in_a_function_closes_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f() -> None:\n    from .c import g\n")
    (package / "sub" / "c.py").write_text("from .. import a\n")
    (package / "d.py").write_text("import pkg.a\n")
    edges = graph(module_names(package, "pkg"))
    assert cycles(edges) == ["pkg.a -> pkg.sub.b -> pkg.sub.c -> pkg.a"]


def test_a_sibling_loaded_by_name_closes_a_cycle(tmp_path: Path) -> None:
    (tmp_path / "one.py").write_text("two = _sibling('two')\n")
    (tmp_path / "two.py").write_text("def later() -> None:\n    import one\n")
    assert cycles(graph(module_names(tmp_path, None))) == ["one -> two -> one"]
