"""Dependencies point one way: the import graph of the `spanlift` package, read from the source.

Every `import` statement counts, also those inside functions (an import on demand is still a
dependency). Two graphs are checked for cycles: one node per module, and one node per unit, where a
unit is a package's modules taken together (`spanlift.platform.fitting`), except the loose modules
of `spanlift` and `spanlift.platform` (`spanlift.errors`, `spanlift.platform.configuration`), each
of which is a unit of its own.
"""

import ast
from collections.abc import Iterable
from pathlib import Path

import spanlift

PACKAGE_ROOT = Path(spanlift.__file__).parent
NAMESPACES = ("spanlift", "spanlift.platform")
"""Packages that group layers rather than being one: their loose modules are units of their own."""

INDEPENDENT = ("spanlift.solvers", "spanlift.backbones", "spanlift.nowcasting")
"""Packages usable without the platform: they import neither it nor Ray nor MLflow."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_modules() -> dict[str, ast.Module]:
    """Every module of the package, by dotted name, parsed."""
    return {
        module_name(path): ast.parse(path.read_text(), filename=str(path))
        for path in sorted(PACKAGE_ROOT.rglob("*.py"))
    }


def imported_names(tree: ast.Module, package: str) -> Iterable[str]:
    """The dotted names an import statement anywhere in `tree` names, resolved to absolute ones
    (`from a import b` names both `a.b` and `a`: `b` may be a module or a name in `a`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def owning_module(name: str, modules: Iterable[str]) -> str | None:
    """The longest prefix of `name` that is one of `modules`."""
    parts = name.split(".")
    known = set(modules)
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def package_of(module: str) -> str:
    """The package a module's relative imports start from."""
    path = PACKAGE_ROOT.parent / Path(*module.split("."))
    return module if (path / "__init__.py").exists() else module.rpartition(".")[0]


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module → spanlift modules it imports, module → top-level outside packages it imports)."""
    trees = source_modules()
    inside: dict[str, set[str]] = {name: set() for name in trees}
    outside: dict[str, set[str]] = {name: set() for name in trees}
    for module, tree in trees.items():
        for name in imported_names(tree, package_of(module)):
            if name.split(".")[0] != "spanlift":
                outside[module].add(name.split(".")[0])
                continue
            target = owning_module(name, trees)
            if target and target != module:
                inside[module].add(target)
    return inside, outside


def parent(module: str) -> str:
    return module.rpartition(".")[0]


def unit(module: str, packages: set[str]) -> str:
    """A package's modules are one unit; a namespace's loose modules are each their own."""
    home = module if module in packages else parent(module)
    return module if home in NAMESPACES and module not in NAMESPACES else home


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages = {parent(name) for name in graph if parent(name)}
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = units.setdefault(unit(module, packages), set())
        edges.update(unit(t, packages) for t in targets)
    return {name: edges - {name} for name, edges in units.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` as [a, b, …, a], or [] when it has none (depth-first search)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if cycle := visit(target):
                return cycle
        path.pop()
        done.add(node)
        return []

    for start in sorted(graph):
        if cycle := visit(start):
            return cycle
    return []


def test_find_cycle_reports_a_cycle_and_accepts_a_layered_graph():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_modules_import_each_other_in_one_direction_only():
    inside, _ = import_graph()
    assert "spanlift.errors" in inside["spanlift.platform.fitting.fit"]  # the graph is read
    cycle = find_cycle(inside)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_packages_import_each_other_in_one_direction_only():
    units = unit_graph(import_graph()[0])
    assert "spanlift.solvers" in units["spanlift.platform.fitting"]
    cycle = find_cycle(units)
    assert not cycle, "import cycle between packages: " + " -> ".join(cycle)


def test_fitting_and_evaluation_do_not_import_each_other():
    units = unit_graph(import_graph()[0])
    fitting, evaluation = "spanlift.platform.fitting", "spanlift.platform.evaluation"
    assert evaluation not in units[fitting], f"{fitting} imports {evaluation}"
    assert fitting not in units[evaluation], f"{evaluation} imports {fitting}"


def test_solvers_backbones_and_nowcasting_need_no_platform_ray_or_mlflow():
    inside, outside = import_graph()
    wrong = [
        f"{module} imports {target}"
        for module in inside
        if module.startswith(INDEPENDENT)
        for target in [
            *(t for t in inside[module] if t.startswith("spanlift.platform")),
            *(t for t in outside[module] if t in ("ray", "mlflow")),
        ]
    ]
    assert not wrong, "; ".join(sorted(wrong))
