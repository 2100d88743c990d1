"""The package's shape: no import cycle, none at all inside a package, and no import from
a lower layer up into a higher one. Every import counts: lazy ones inside functions (a
lazy import hides a cycle from Python, not from a reader) and those under
`if TYPE_CHECKING:` (a type-only import is still a dependency a reader and mypy follow)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "gatekeeper"

# Lowest first. A module may import from its own layer and the ones below.
LAYERS: list[tuple[str, ...]] = [
    # ground floor: shared by everything, imports nothing of gatekeeper above it
    ("errors", "model", "verdict", "fmt", "yamltree", "yamlfile", "safe_open", "registry",
     "run_state", "statedata", "extras", "dburl"),
    ("engine", "checks", "expr", "policy"),  # the pure engine and the rule format
    ("sources", "report", "notify", "history", "annotate"),  # edges: I/O and reporting
    ("session", "baselines", "gate"),  # judging a run over time, for every front end
    ("live", "daemon", "inprocess", "integrations", "toolkit"),  # front ends
    ("cli", "__main__"),  # the command line
]

# Edges that break the rules today, each with why, so the list can only shrink.
ALLOWED: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else ""
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    if module == "gatekeeper":
        return 0  # the package itself: the version string
    raise AssertionError(f"{module}: not in any layer of tests/test_layers.py; add it")


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_pkg = MODULES[importer].name == "__init__.py"
    base = importer.split(".")
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str) -> set[str]:
    """The gatekeeper modules `module` imports, anywhere in it (TYPE_CHECKING too)."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    return {m for m in found if m == "gatekeeper" or m.startswith("gatekeeper.")} - {module}


GRAPH = {m: {t for t in imports_of(m) if t in MODULES} for m in MODULES}


def test_no_import_goes_up_a_layer() -> None:
    bad = []
    for module, targets in GRAPH.items():
        for target in targets:
            if layer_of(target) > layer_of(module) and (module, target) not in ALLOWED:
                bad.append(f"{module} -> {target}")
    assert not bad, "imports up a layer (see LAYERS in tests/test_layers.py):\n" + "\n".join(
        sorted(bad)
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle() -> None:
    graph = {m: {t for t in ts if (m, t) not in ALLOWED} for m, ts in GRAPH.items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def package_of(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def test_no_import_cycle_inside_a_package() -> None:
    """Within one package the modules form a DAG, with no exemption: a package's own
    modules can always be ordered (the data, the contract, the registry, ...)."""
    inside = {m: {t for t in ts if package_of(t) == package_of(m)} for m, ts in GRAPH.items()}
    cycles = _cycles(inside)
    assert not cycles, "import cycles inside a package:\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_type_checking_imports_are_seen() -> None:
    """An import under `if TYPE_CHECKING:` is an edge like any other."""
    assert "gatekeeper.notify.settings" in GRAPH["gatekeeper.notify.base"]


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)
