"""The house rules, checked from the code itself (docs/architecture.md states them in words).

* Layers: cli / deployments → flows → tasks → trainer → evals → envs. A package imports only from its own layer's
  packages or from lower layers, and the package graph has no cycle. evals sits below trainer: the trainer teaches the
  base the eval suites (``evals.mcq``), reports Pass@1 with their statistics (``evals.stats``) and names harnesses by
  their kind (``evals.spec.HarnessKind``); an eval never needs the trainer (it talks to a served policy).
* No import cycle between modules, counting imports inside functions (a lazy import is still an arrow).
* ``envs``, ``trainer`` and ``evals`` never import Prefect: they run in Ray workers, on the cluster, in benchmarks.
* No function longer than ``MAX_FUNCTION_LINES`` except the data tables listed in ``DATA_TABLES``.
* Backend choice lives in ``flows/placement/``: elsewhere nothing compares with a backend member
  (``backend is EngineBackend.VLLM``) — code asks the registries (``ENGINES[...]``, ``TRAINERS[...]``, or a map keyed
  by the members) instead of branching; the profile's own validator (``flows/config/``) is the one exception.

The graph is built with ``ast`` from the source files, so the test sees exactly what is written, not what happens
to be imported at run time.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"envs": 0, "evals": 1, "trainer": 2, "tasks": 3, "flows": 4, "cli": 5, "deployments": 5}
PREFECT_FREE = ("envs", "trainer", "evals")
MAX_FUNCTION_LINES = 80
# Functions that are content, not logic: a literal table of tasks or facts is easier to review whole.
DATA_TABLES: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line} → {self.target}"


def module_files() -> dict[str, Path]:
    """Every module of our packages, by dotted name (a package's ``__init__`` is the package's name)."""
    modules = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:  # relative: resolve against the importing module's package
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        prefix = ".".join([*base, node.module] if node.module else base)
    else:
        prefix = node.module or ""
    for alias in node.names:  # `from pkg import submodule` is an arrow to the submodule, not to pkg/__init__
        yield f"{prefix}.{alias.name}"
    yield prefix


def import_arrows(modules: dict[str, Path]) -> list[Arrow]:
    """One arrow per import statement (module level or inside a function) to one of our modules."""
    arrows = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _imported_names(node, module, path.name == "__init__.py"):
                if name in modules and name != module:
                    arrows.append(Arrow(module, name, node.lineno))
                    break  # the most specific module named by this statement
    return arrows


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _package(module: str) -> str:
    return module.split(".")[0]


def test_no_import_cycle_between_modules() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for arrow in import_arrows(module_files()):
        edges[arrow.source].add(arrow.target)
    assert cycles(edges) == []


def test_packages_import_only_their_layer_or_below_without_cycles() -> None:
    arrows = import_arrows(module_files())
    upward = [str(a) for a in arrows if LAYERS[_package(a.target)] > LAYERS[_package(a.source)]]
    assert upward == []
    package_edges: dict[str, set[str]] = defaultdict(set)
    for arrow in arrows:
        if _package(arrow.source) != _package(arrow.target):
            package_edges[_package(arrow.source)].add(_package(arrow.target))
    assert cycles(package_edges) == []


def test_libraries_never_import_prefect() -> None:
    offenders = []
    for module, path in module_files().items():
        if _package(module) not in PREFECT_FREE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{module}:{node.lineno}" for name in names if name.split(".")[0] == "prefect"]
    assert offenders == []


def test_no_function_longer_than_the_limit_outside_data_tables() -> None:
    too_long = []
    for module, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                name = f"{module}.{node.name}"
                if length > MAX_FUNCTION_LINES and name not in DATA_TABLES:
                    too_long.append(f"{name} ({length} lines)")
    assert too_long == []


BACKEND_ENUMS = ("EngineBackend", "TrainerBackend")
BACKEND_CHOICE_LIVES_IN = ("flows.placement", "flows.config", "trainer.backends")  # and the enums themselves


def backend_branches(modules: dict[str, Path]) -> list[str]:
    """Every comparison with a backend member (``backend is EngineBackend.VLLM``) outside the placement package: an
    ``if`` on the backend. A registry keyed by the members (``tasks.engine.ROLLOUT_ENGINES``) is not one."""
    found = []
    for module, path in modules.items():
        if module.startswith(BACKEND_CHOICE_LIVES_IN):
            continue
        for compare in ast.walk(ast.parse(path.read_text())):
            if not isinstance(compare, ast.Compare):
                continue
            for node in ast.walk(compare):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in BACKEND_ENUMS
                ):
                    found.append(f"{module}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_backend_choice_lives_in_the_placement_package() -> None:
    assert backend_branches(module_files()) == [], "ask ENGINES / TRAINERS (flows.placement) instead"


def test_the_graph_sees_a_cycle_and_an_upward_arrow(tmp_path: Path) -> None:
    """The checks above can fail: a made-up pair of modules that import each other, one of them upward."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "a.py").write_text("from flows import b\n")
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "b.py").write_text("def f():\n    from envs.a import x\n")
    modules = {"envs.a": tmp_path / "envs" / "a.py", "flows.b": tmp_path / "flows" / "b.py"}
    arrows = import_arrows(modules)
    assert {(a.source, a.target) for a in arrows} == {("envs.a", "flows.b"), ("flows.b", "envs.a")}
    edges: dict[str, set[str]] = defaultdict(set)
    for arrow in arrows:
        edges[arrow.source].add(arrow.target)
    assert cycles(edges) == [["envs.a", "flows.b"]]
    (tmp_path / "flows" / "c.py").write_text(
        "def g(config):\n    return config.backends.engine is EngineBackend.VLLM\n"
    )
    assert backend_branches({"flows.c": tmp_path / "flows" / "c.py"}) == ["flows.c:2 EngineBackend.VLLM"]
