"""The package has no import cycle: not between modules, not between subpackages, not even through an
import inside a function (such an import hides the cycle from Python until the function runs).

The graph is read from the source with `ast`, so every import counts, wherever it sits.
Between subpackages the rule is the layout's: data flows one way, so when `backends` imports
`toolkit`, nothing in `toolkit` may import `backends`, directly or through a third subpackage.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

import harness

ROOT = Path(harness.__file__).parent


def modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) for every module under `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _targets(name: str, package: bool, node: ast.AST) -> list[str]:
    """Every dotted name an import statement may load (the module and, for `from`, each name in it)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = name.split(".") if package else name.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    return [origin] + [f"{origin}.{alias.name}" for alias in node.names]


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> module for every import under `root`, at module level or inside a function."""
    known = modules(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, (path, package) in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph.add_edges_from((name, t) for t in _targets(name, package, node) if t in known and t != name)
    return graph


def subpackage_graph(graph: nx.DiGraph) -> nx.DiGraph:
    """The same imports between the top-level parts of the package (`harness.toolkit`, `harness.gates.runner`...)."""
    def part(name: str) -> str:
        return ".".join(name.split(".")[:2])
    collapsed = nx.DiGraph()
    collapsed.add_nodes_from(part(n) for n in graph)
    collapsed.add_edges_from((part(a), part(b)) for a, b in graph.edges if part(a) != part(b))
    return collapsed


def cycles(graph: nx.DiGraph) -> list[str]:
    """One readable cycle per strongly connected group: 'a -> b -> c -> a'."""
    found = []
    for group in nx.strongly_connected_components(graph):
        if len(group) > 1:
            loop = [a for a, _ in nx.find_cycle(graph.subgraph(group))]
            start = loop.index(min(loop))
            loop = loop[start:] + loop[:start]
            found.append(" -> ".join(loop + loop[:1]))
    return sorted(found)


def test_no_import_cycle_between_modules():
    assert cycles(import_graph()) == []


def test_no_import_cycle_between_subpackages():
    assert cycles(subpackage_graph(import_graph())) == []


@pytest.mark.parametrize("inside_function", [False, True])
def test_a_cycle_is_found_and_named(tmp_path, inside_function):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    hidden = "def later():\n    from ..a import x\n" if inside_function else "from .. import a\n"
    (pkg / "sub" / "b.py").write_text(hidden)
    graph = import_graph(pkg)
    assert cycles(graph) == ["pkg.a -> pkg.sub.b -> pkg.a"]
    assert cycles(subpackage_graph(graph)) == ["pkg.a -> pkg.sub -> pkg.a"]


def test_the_readmes_package_map_names_each_subpackage_once_none_importing_one_below_it():
    """README's package map is how a newcomer places a file: every subpackage once (a row written twice
    or one missing fails), in the order data flows, each importing only from the rows above it."""
    listed = re.findall(r"^\| `harness/(\w+)/` \|", (ROOT.parent / "README.md").read_text(), re.M)
    assert sorted(listed) == sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    row = {f"harness.{name}": i for i, name in enumerate(listed)}
    upward = [f"{a} imports {b}" for a, b in subpackage_graph(import_graph()).edges
              if a in row and b in row and row[b] > row[a]]
    assert upward == []


def test_reading_a_manifest_does_not_load_onnx_or_the_cli():
    import subprocess
    import sys
    code = ("import sys, harness.partition.manifest, harness.partition; "
            "print(sorted(m for m in ('onnx', 'onnxruntime', 'harness.cli.main') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
