"""The package's layers, read from its source: no import cycle (lazy imports included), and the core
(models, sampling, rl) imports nothing of the agents, environments, scenarios or the loop above it."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "rlanything_jax"
CORE = ("models", "sampling", "rl")
ABOVE_CORE = ("agents", "envs", "scenarios", "curriculum", "loop", "run", "assemble", "main", "evaluate",
              "evaluation", "reward_models", "warm_start", "planning", "play")


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
    assert f"{PACKAGE}.models.families" in graph[f"{PACKAGE}.models.hf_io"]


def test_no_module_imports_itself_back():
    graph = _graph()
    cycles = [cycle for name in sorted(graph) if (cycle := _cycle_from(name, graph))]
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles[:5])


def _layer(module: str) -> str:
    return (module.split(".") + [""])[1]


def test_the_core_imports_nothing_above_it():
    graph = _graph()
    upward = sorted(f"{name} -> {target}" for name, targets in graph.items() if _layer(name) in CORE
                    for target in targets if _layer(target) in ABOVE_CORE)
    assert not upward, "\n".join(upward)


def test_a_model_family_is_reached_only_through_the_model_registry():
    """Outside `models/`, no module imports a family's package (models/qwen3_vl): the registry
    (models/families.py) is the one door, so a new family is a new package."""
    graph = _graph()
    family = f"{PACKAGE}.models.qwen3_vl"
    reached = sorted(f"{name} -> {target}" for name, targets in graph.items()
                     if not name.startswith(f"{PACKAGE}.models.") for target in targets
                     if target == family or target.startswith(family + "."))
    assert not reached, "\n".join(reached)
    assert any(t.startswith(family) for t in graph[f"{PACKAGE}.models.families"])   # the door exists
