"""The package's own imports form no cycle, and each part (a top-level module or a subpackage)
imports only parts of its own layer or of a lower one: the layers of ``docs/architecture.md``."""

import ast
from pathlib import Path

import triton_dist_plugin

# The imported package: the checkout under an editable install, the installed wheel otherwise.
PACKAGE = Path(triton_dist_plugin.__file__).resolve().parent

#: Lowest first; every part of the package is in exactly one.
LAYERS = [
    ("facts", {"_compat", "_lifetime", "settings", "policy", "hook_objects", "requests", "_callsite", "failures",
               "settle"}),
    ("hooks", {"hookspecs"}),
    ("built-in plugins", {"timing", "kernel_time", "distributed", "reporting", "tiling", "search"}),
    ("bus and stores", {"bus", "store"}),
    ("engine", {"engine", "compiling", "frozen", "untuned", "job"}),
    ("isolation", {"isolation"}),
    ("the patched Autotuner", {"patched"}),
    ("front ends", {"function_level", "function_keys", "tune", "contextual", "contextual_job", "autotuner", "cli"}),
    ("switch", {"activation", "patch"}),
]


def _graph() -> dict:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                for dep in [target] + [f"{target}.{alias.name}" for alias in node.names]:
                    # A package above the importing module is imported first anyway: no edge.
                    if dep in modules and dep != name and not name.startswith(dep + "."):
                        graph[name].add(dep)
    return graph


def _part(module: str) -> str:
    """``triton_dist_plugin.store.cache`` -> ``store``; the package itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_part_of_the_package_is_in_one_layer():
    parts = {_part(m) for m in _graph()} - {""}
    placed = [p for _, members in LAYERS for p in members]
    assert sorted(placed) == sorted(set(placed)) and set(placed) == parts, (
        f"not in a layer: {sorted(parts - set(placed))}; in none of the package: {sorted(set(placed) - parts)}")


def test_no_part_imports_a_layer_above_its_own():
    layer = {p: i for i, (_, members) in enumerate(LAYERS) for p in members}
    upward = sorted(f"{name} -> {dep} ({LAYERS[layer[_part(name)]][0]} imports {LAYERS[layer[_part(dep)]][0]})"
                    for name, deps in _graph().items() if _part(name)
                    for dep in deps if _part(dep) and layer[_part(dep)] > layer[_part(name)])
    assert not upward, "upward imports: " + "; ".join(upward)


def test_no_import_cycles_below_the_package():
    graph = _graph()
    graph.pop("triton_dist_plugin")  # the package's front door imports everything, on purpose
    for deps in graph.values():
        deps.discard("triton_dist_plugin")
    assert len(graph) > 10 and any(graph.values())  # the scan read the modules
    cycles, done = [], set()

    def visit(name, path):
        for dep in graph[name]:
            if dep in path:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in done:
                visit(dep, path + [dep])
        done.add(name)

    for name in graph:
        if name not in done:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def _module_names(tree: ast.AST) -> set:
    """The names a module binds to the package's own modules (``from . import x``, ``from .p import m``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _calls_back_through_globals(path: Path) -> list:
    """Where ``path`` puts an object (not a plain constant) into a global of another of the
    package's modules: ``launch.handler = self`` or ``setattr(launch, "handler", self)``. The module
    that reads that global then calls whatever was put there: an upward call no import shows."""
    tree = ast.parse(path.read_text())
    modules, found = _module_names(tree), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            hits = [t for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                    and t.value.id in modules]
            if hits and not isinstance(node.value, ast.Constant):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in modules:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_part_calls_another_back_through_a_global_it_sets():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _calls_back_through_globals(path)]
    assert not found, ("an object put into another module's global, for that module to call back: "
                       "register it through that module's own API instead (e.g. launch.misses_to): " + "; ".join(found))


def test_the_global_check_sees_a_call_back_up(tmp_path):
    # The check itself, on the pattern it exists to refuse (the contextual session once did this).
    bad = tmp_path / "front.py"
    bad.write_text("from .patched import kernel_state\n\ndef run(session):\n    kernel_state.session = session\n"
                   "    setattr(kernel_state, 'session', session)\n    kernel_state.active = True\n")
    found = _calls_back_through_globals(bad)
    assert len(found) == 2 and all("session" in f for f in found), found


#: The sizes past which a module or a function is to be split (docstrings count).
MODULE_LINES, FUNCTION_LINES = 320, 60


def test_no_module_and_no_function_grows_past_its_size():
    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(PACKAGE).as_posix()
        if len(text.splitlines()) > MODULE_LINES:
            big.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    big.append(f"{name}: {node.name}() {lines} lines")
    assert not big, "split these: " + "; ".join(big)
