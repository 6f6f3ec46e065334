"""The package's own imports form no cycle: each module depends only on what lies below it."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "triton_dist_plugin"


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
                    if dep in modules and dep != name:
                        graph[name].add(dep)
    return graph


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
