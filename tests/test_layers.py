"""The package's layers, read from its source: no import cycle (lazy imports included), and each layer folder
(core, agents, scenarios, system) imports only from itself and the layers below it; the command line (the
modules at the package root and `experiments/`) sits on top."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "rlanything_jax"
# Bottom to top; anything else in the package (the root modules, experiments/) is the command line, on top.
LAYERS = ("core", "agents", "scenarios", "system")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports anywhere in its source (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                      for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{name}: relative import (the package imports by absolute names)")
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A path start -> ... -> start, if any (depth-first)."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph[node]:
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_the_graph_is_read():
    graph = _graph()
    assert f"{PACKAGE}.agents.rollout_config" in graph[f"{PACKAGE}.agents.rollout"]
    assert f"{PACKAGE}.core.models.families" in graph[f"{PACKAGE}.core.models.hf_io"]


def test_no_module_imports_itself_back():
    graph = _graph()
    cycles = [cycle for name in sorted(graph) if (cycle := _cycle_from(name, graph))]
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles[:5])


def _layer(module: str) -> int:
    """The layer's height: its index in LAYERS; the command line above them all."""
    folder = (module.split(".") + [""])[1]
    return LAYERS.index(folder) if folder in LAYERS else len(LAYERS)


def test_the_layers_are_read():
    assert _layer(f"{PACKAGE}.core.rl.losses") == 0 and _layer(f"{PACKAGE}.agents.envs.runner") == 1
    assert _layer(f"{PACKAGE}.system.loop") == 3 and _layer(f"{PACKAGE}.main") == _layer(f"{PACKAGE}.experiments") == 4


def test_no_layer_imports_a_layer_above_it():
    graph = _graph()
    upward = sorted(f"{name} -> {target}" for name, targets in graph.items() for target in targets
                    if _layer(target) > _layer(name))
    assert not upward, "\n".join(upward)


def test_a_model_family_is_reached_only_through_the_model_registry():
    """Outside `core/models/`, no module imports a family's package (core/models/qwen3_vl): the registry
    (core/models/families.py) is the one door, so a new family is a new package."""
    graph = _graph()
    family = f"{PACKAGE}.core.models.qwen3_vl"
    reached = sorted(f"{name} -> {target}" for name, targets in graph.items()
                     if not name.startswith(f"{PACKAGE}.core.models.") for target in targets
                     if target == family or target.startswith(family + "."))
    assert not reached, "\n".join(reached)
    assert any(t.startswith(family) for t in graph[f"{PACKAGE}.core.models.families"])   # the door exists
