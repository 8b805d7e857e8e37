"""The ``sharewise`` package imports only downward (docs/development/conventions.md, practice 15): no import
cycle of any kind, and every import between its packages goes from a higher layer to a lower one (``LAYERS``).

The graph has one node per module of the package (a package is its ``__init__``) and an edge from a module to
every ``sharewise`` module it imports, read with ``ast`` from ``import sharewise.x``, ``from sharewise.x import y``
and relative imports wherever they stand: at the top, inside functions and classes, in ``try`` blocks, and under
``if TYPE_CHECKING:``. An import inside a function counts: it defers the import, not the dependency, and deferred
imports are how the predictor's cycle of five modules (``api``, ``conformal``, ``evaluation``, ``model``,
``persistence``) stayed unnoticed. A ``TYPE_CHECKING`` import counts too: it never runs, but it says the module
is written in terms of the other, which a layer below must not be (``engine.world`` once annotated with the loop
that imports it; ``profiler.modes`` with the config that checks a mode against them).

Resolution: ``from pkg import name`` is an edge to ``pkg.name`` when that is a module; to the module that
``pkg``'s ``_EXPORTS`` table names for ``name`` when the package loads its names lazily (PEP 562, as
``sharewise.predictor`` does); else to ``pkg``. Importing ``pkg.mod`` also runs ``pkg/__init__``, but no edge is
drawn for that: a package's ``__init__`` importing its own modules builds its namespace, it is not a layer above.
"""

from __future__ import annotations

import ast
import functools
import graphlib
from pathlib import Path

import sharewise

PACKAGE_ROOT = Path(sharewise.__file__).resolve().parent


def module_files(root: Path) -> dict[str, Path]:
    """Return ``{dotted module name: file}`` of every module under package folder ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_checking: bool = True):
    """Yield every Import/ImportFrom node under ``tree``; without ``type_checking``, not those in the body of
    ``if TYPE_CHECKING:`` (only what runs)."""
    for child in ast.iter_child_nodes(tree):
        # The else branch of ``if TYPE_CHECKING:`` runs; its body does not.
        skip_body = not type_checking and isinstance(child, ast.If) and _is_type_checking(child.test)
        for node in child.orelse if skip_body else [child]:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            yield from _imports(node, type_checking)


@functools.cache
def _lazy_exports(path: Path) -> dict[str, str]:
    """The ``_EXPORTS`` table (public name -> module) of a package ``__init__`` that loads names lazily, or {}."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def import_graph(root: Path, type_checking: bool = True) -> dict[str, set[str]]:
    """Return ``{module: {modules it imports}}`` for the package at folder ``root`` (module docstring).

    Example: ``{"sharewise.predictor.conformal": {"sharewise.predictor.model", ...}, ...}``.
    """
    files = module_files(root)
    package = root.name

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), filename=str(path)), type_checking):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                lazy = _lazy_exports(files[base]) if base in files and files[base].name == "__init__.py" else {}
                for alias in node.names:
                    if f"{base}.{alias.name}" in files:
                        targets.append(f"{base}.{alias.name}")
                    else:
                        targets.append(f"{base}.{lazy[alias.name]}" if alias.name in lazy else base)
            for target in targets:
                if target == package or target.startswith(package + "."):
                    found = resolve(target)
                    if found is not None and found != name:
                        graph[name].add(found)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Return one import cycle of ``graph`` as ``[a, b, ..., a]`` (a imports b ...), or None (graphlib finds it)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))  # graphlib lists it along the edges "is imported by"
    return None


def test_the_sharewise_package_has_no_import_cycle():
    graph = import_graph(PACKAGE_ROOT)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle (each module imports the next): " + " -> ".join(cycle)
    # The graph is the real one: a function-level import resolved through the predictor's lazy exports, and the
    # predictor's layers (estimator < resampling < conformal procedure < workflows).
    assert {"sharewise.predictor.api", "sharewise.predictor.conformal"} <= graph["sharewise.app.prediction"]
    assert "sharewise.predictor.model" in graph["sharewise.predictor.conformal"]
    assert "sharewise.predictor.folds" in graph["sharewise.predictor.conformal"]
    assert "sharewise.predictor.conformal" in graph["sharewise.predictor.api"]
    assert "sharewise.predictor.calibration" in graph["sharewise.predictor.model"]


def test_a_cycle_through_a_function_level_import_is_found_and_named(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("_EXPORTS = {'Thing': 'c'}\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import Thing\n")  # relative, lazy export, in a function
    (pkg / "c.py").write_text("import json\n\nclass C:\n    def g(self):\n        import pkg.a\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\nelse:\n    import pkg.c\n"
    )
    graph = import_graph(pkg, type_checking=False)
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.sub.b"},
        "pkg.c": {"pkg.a"},
        "pkg.d": {"pkg.c"},  # only what runs: the TYPE_CHECKING import is left out, its else branch is not
        "pkg.sub": set(),
        "pkg.sub.b": {"pkg.c"},
    }
    assert import_graph(pkg)["pkg.d"] == {"pkg.a", "pkg.c"}  # by default it counts
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"pkg.a", "pkg.sub.b", "pkg.c"}
    for here, there in zip(cycle, cycle[1:], strict=False):  # named in import order
        assert there in graph[here]
    (pkg / "c.py").write_text("import json\n")
    assert find_cycle(import_graph(pkg)) is None


#: The packages of ``sharewise`` from the bottom up: a module may import its own package and those of lower
#: layers, never one of its own layer or above. One layer may hold several packages that know nothing of each
#: other (the profiler and the predictor; the policies and the planner).
LAYERS = (
    ("errors", "stats", "lazy"),
    ("registry", "command_spec"),
    ("datasets",),
    ("profiler", "predictor"),
    ("engine",),
    ("policy", "planner"),
    ("runtime", "observe"),
    ("deploy",),
    ("app",),
    ("cli",),
    ("__main__",),
)


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "sharewise"


def layer_violations(graph: dict[str, set[str]], layers=LAYERS) -> list[str]:
    """Every import from a package to one of its own layer or above, as ``"a.b imports c.d (layer x -> y)"``."""
    level = {pkg: i for i, group in enumerate(layers) for pkg in group}
    out = []
    for module, targets in sorted(graph.items()):
        here = package_of(module)
        if here == "sharewise":  # the package's own __init__ names its version only
            continue
        for target in sorted(targets):
            there = package_of(target)
            if there == here:
                continue
            if here not in level or there not in level:
                out.append(f"{module} imports {target}: package {here if here not in level else there!r} has no layer")
            elif level[there] >= level[here]:
                out.append(f"{module} imports {target} (layer {level[here]} {here} -> layer {level[there]} {there})")
    return out


def test_no_import_cycle_of_any_kind():
    cycle = find_cycle(import_graph(PACKAGE_ROOT))  # TYPE_CHECKING imports included
    assert cycle is None, "import cycle (each module imports the next): " + " -> ".join(cycle)


def test_packages_import_only_lower_layers():
    graph = import_graph(PACKAGE_ROOT)
    assert layer_violations(graph) == []
    assert {package_of(m) for m in graph} - {"sharewise"} == {p for g in LAYERS for p in g}, "a package has no layer"


def test_a_layer_violation_is_named(tmp_path):
    graph = {"sharewise.engine.loop": {"sharewise.policy.ours", "sharewise.datasets.pair"},
             "sharewise.policy.pal": {"sharewise.planner.pairing"}, "sharewise.app.run": {"sharewise.cli.run"}}
    assert layer_violations(graph) == [
        "sharewise.app.run imports sharewise.cli.run (layer 8 app -> layer 9 cli)",
        "sharewise.engine.loop imports sharewise.policy.ours (layer 4 engine -> layer 5 policy)",
        "sharewise.policy.pal imports sharewise.planner.pairing (layer 5 policy -> layer 5 planner)",
    ]


def _private_imports(root: Path) -> list[str]:
    """``from sharewise.a.b import _name`` (or ``import`` of a ``_module``) whose target is in another package."""
    files = module_files(root)
    out = []
    for name, path in files.items():
        for node in _imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sharewise."):
                if package_of(node.module) == package_of(name):
                    continue
                private = [a.name for a in node.names if a.name.startswith("_")]
                private += [p for p in node.module.split(".") if p.startswith("_")]
                if private:
                    out.append(f"{name} imports {node.module}: {', '.join(private)}")
    return out


def test_no_private_name_crosses_a_package():
    assert _private_imports(PACKAGE_ROOT) == []
