"""How the isolation worker finds a kernel: by importing its module where it can, else from its source.

The worker's ``sys.path`` is this process's less the working directory (``search_path``). A kernel
it cannot import the same way (one defined in the main script, inside a function, or in a module
found only through the working directory) is rebuilt there instead, so nothing of the user's
module runs there again. It is sent, over the worker's private socket, each ``@triton.jit``
function's source as ``inspect`` finds it here, dedented, its decorators replaced by one that
applies ``triton.jit`` again, at the same line numbers (Triton's cache key includes the first
line, so the worker finds what this process compiled in Triton's disk cache); and the globals and
closure variables it names, as data: modules and other importable objects by their name, other
``@triton.jit`` functions the same way (recursively), plain values by value. Anything else leaves
the kernel unisolated, with the reason. The worker's side is ``isolate_worker.rebuild``.
"""

from __future__ import annotations
import __future__

import ast
import inspect
import os
import sys
import textwrap
import types
from typing import Any, Optional

from .. import _compat

MAIN = ("__main__", "__mp_main__")
_PLAIN = (int, float, bool, str, type(None))
_ANNOTATIONS = __future__.annotations.compiler_flag  # the one future flag that changes a kernel's meaning
_JIT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline")


class Unisolated(Exception):
    """This kernel or these arguments cannot be run in a worker; the reason says why."""


def search_path() -> tuple[list[str], set[str]]:
    """The worker's ``sys.path``: this process's entries, made absolute, less ``''`` and the
    working directory (where a stray ``json.py`` or ``torch.py`` would run in the worker), unless
    ``PYTHONPATH`` names that directory itself; and the real paths of the entries left out."""
    try:
        cwd: Any = os.path.realpath(os.getcwd())
    except OSError:  # a working directory since removed: nothing of it to import
        cwd = None
    named = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    kept: list[str] = []
    for entry in sys.path:
        if isinstance(entry, str) and entry and (os.path.realpath(entry) != cwd or cwd in named):
            kept += [os.path.abspath(entry)] if os.path.abspath(entry) not in kept else []
    return kept, set() if cwd is None or cwd in map(os.path.realpath, kept) else {cwd}


def reachable(module: str) -> bool:
    """Whether a worker imports the same ``module`` by name: not the main script, and not found
    only through the working directory (left off the worker's path)."""
    top = module.partition(".")[0]
    loaded = sys.modules.get(top)
    if top in MAIN or loaded is None:
        return top in sys.builtin_module_names
    file = getattr(loaded, "__file__", None)
    if not isinstance(file, str):  # built in, frozen, or a namespace package
        return True
    where = os.path.dirname(os.path.dirname(file) if hasattr(loaded, "__path__") else file)
    return os.path.realpath(where) not in search_path()[1]


def where(fn: Any) -> tuple[str, str]:
    """How a worker imports ``fn``: the module and name of the outermost object defined with it
    (the worker then follows ``.fn`` down to an object of ``fn``'s class). Raises ``Unisolated``
    where it cannot (``locate`` then has it rebuilt)."""
    base = _compat.base_function(fn)
    module, name = getattr(base, "__module__", None), getattr(base, "__qualname__", "")
    if not module or "<locals>" in name:
        raise Unisolated(f"{name or fn!r} is not defined at module level")
    if module in MAIN:
        raise Unisolated(f"{name} is defined in the main script")
    if not reachable(module):
        raise Unisolated(f"{name} is defined in {module}, which only the working directory holds")
    return module, name


def module_of(fn: Any) -> Optional[str]:
    """The module a worker imports ``fn`` from; None where it rebuilds it."""
    try:
        return where(fn)[0]
    except Unisolated:
        return None


def heuristics_of(fn: Any) -> tuple[list, Any]:
    """The ``@triton.heuristics`` over ``fn``, outermost first, and what they wrap."""
    layers = []
    while isinstance(fn, _compat.autotuner_module.Heuristics):
        layers.append(fn)
        fn = fn.fn
    return layers, fn


def locate(fn: Any) -> tuple[dict, list]:
    """What a job says of ``fn``: ``{"module", "name", "kind"}`` to import its ``@triton.jit``
    function, or ``{"source", "name", "kind"}`` to rebuild it; and the ``@triton.heuristics``
    over it, outermost first, which this process evaluates for each candidate
    (``with_heuristics``): a wrapper made where no module names it is found all the same."""
    layers, jit = heuristics_of(fn)
    try:
        module, name = where(jit)
        return {"module": module, "name": name, "kind": type(jit).__name__}, layers
    except Unisolated as exc:
        why = str(exc)
    if not is_jit(jit):
        raise Unisolated(f"{why}, and the isolation worker can rebuild only @triton.jit functions, not a "
                         f"{type(jit).__name__}; define it in an importable module to isolate it")
    try:
        return {"source": source_of(jit), "name": jit.fn.__qualname__, "kind": type(jit).__name__}, layers
    except Unisolated as exc:
        raise Unisolated(f"{why}, so the isolation worker would rebuild it from its source, but {exc}") from None


def with_heuristics(layers: list, args: tuple, kwargs: dict, meta: dict, grid: Any) -> dict:
    """``meta`` with the values that ``layers`` (``@triton.heuristics``, outermost first) add, as
    ``Heuristics.run`` computes them: a rebuilt kernel is sent its meta-parameters complete."""
    meta = dict(meta)
    for layer in layers:
        named = {**dict(zip(layer.arg_names, args)), "grid": grid, "warmup": False, **kwargs, **meta}
        for key, heuristic in layer.values.items():
            meta[key] = named[key] = heuristic(named)
    return meta


def is_jit(value: Any) -> bool:
    """A ``@triton.jit`` function, compiled (``JITFunction``) or interpreted."""
    return type(value).__name__ in ("JITFunction", "InterpretedFunction") and inspect.isfunction(
        getattr(value, "fn", None))


def importable(value: Any, module: Any, qualname: Any) -> bool:
    """Whether a worker finds ``value`` by importing ``module`` and following ``qualname``."""
    if not isinstance(module, str) or not isinstance(qualname, str) or module in MAIN or "<locals>" in qualname:
        return False
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is value and reachable(module)


def source_of(jit: Any) -> dict:
    """What a worker needs to rebuild ``jit`` (a ``@triton.jit`` function) without importing its
    module; raises ``Unisolated`` when something it uses cannot be sent."""
    sender = _Sender()
    root = sender.function(jit)
    return {"namespaces": sender.namespaces, "functions": sender.functions, "root": root}


class _Sender:
    def __init__(self) -> None:
        self.namespaces: list[dict] = []  # one per globals dict (or closure): name -> item
        self.functions: list[Any] = []
        self._namespace_of: dict[int, int] = {}
        self._function_of: dict[int, int] = {}

    def function(self, jit: Any) -> int:
        if id(jit) in self._function_of:  # a helper called twice, or recursion
            return self._function_of[id(jit)]
        base = jit.fn
        index = self._function_of[id(jit)] = len(self.functions)
        self.functions.append(None)
        source, node, decorated = _source(base)
        closure = _closure(base)
        key = id(base) if closure else id(base.__globals__)  # a closure's values are its own
        if key not in self._namespace_of:
            self._namespace_of[key] = len(self.namespaces)
            self.namespaces.append({})
        items = self.namespaces[self._namespace_of[key]]
        for name in _names(node):
            scope = closure if name in closure else base.__globals__
            if name in scope and name not in items:  # else a builtin, or undefined here as well
                items[name] = self.item(scope[name], name, base.__qualname__)
        self.functions[index] = {
            "namespace": self._namespace_of[key], "name": base.__name__, "source": source, "decorated": decorated,
            "file": base.__code__.co_filename, "flags": base.__code__.co_flags & _ANNOTATIONS,
            "options": _options(jit)}
        return index

    def item(self, value: Any, name: str, user: str) -> tuple:
        import triton.language as tl

        if isinstance(value, types.ModuleType):
            module = value.__name__
            if sys.modules.get(module) is value and module not in MAIN and reachable(module):
                return ("module", module)
            raise Unisolated(f"{user} uses the module {module}, which the isolation worker cannot import (the main "
                             "script, or a module found only through the working directory, which the worker does "
                             "not search); install it, or name its directory in PYTHONPATH")
        if is_jit(value):
            base = value.fn
            if importable(value, base.__module__, base.__qualname__):
                return ("import", base.__module__, base.__qualname__)
            return ("function", self.function(value))
        elif isinstance(value, tl.constexpr) and (_plain(value.value) or type(value.value) is tl.dtype):
            return ("constexpr", self.item(value.value, name, user))
        elif type(value) is tl.dtype:
            return ("dtype", value.name)
        elif _plain(value):
            return ("value", value)
        elif importable(value, getattr(value, "__module__", None), getattr(value, "__qualname__", None)):
            return ("import", value.__module__, value.__qualname__)
        raise Unisolated(
            f"{user} uses {name} (a {type(value).__name__}), which cannot be sent to the isolation worker: only "
            "modules, importable functions and classes, @triton.jit functions and plain values (numbers, strings, "
            "None, tuples of them, tl.constexpr of them, Triton dtypes) can; make it a tl.constexpr, or define the "
            "kernel and what it uses in an importable module")


def _closure(fn: Any) -> dict:
    """The variables ``fn`` closes over that hold a value."""
    found = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            found[name] = cell.cell_contents
        except ValueError:  # not assigned yet
            continue
    return found


def _options(jit: Any) -> dict:
    """The ``triton.jit`` options that change what runs (an interpreted function keeps them as given)."""
    given = getattr(jit, "kwargs", None) or {k: getattr(jit, k, None) for k in _JIT_OPTIONS}
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if k in _JIT_OPTIONS}
    return {k: v for k, v in options.items() if v is not None and _plain(v)}


def _plain(value: Any) -> bool:
    if type(value) is tuple:
        return all(_plain(v) for v in value)
    return type(value) in _PLAIN


def _source(fn: Any) -> tuple[str, ast.FunctionDef, bool]:
    """``fn``'s source, dedented, at its own line numbers, its decorators replaced by one line
    ``@__tdp_jit__`` where the first one was; the parsed ``def``; whether it had decorators."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise Unisolated(f"the source of {fn.__qualname__} is not available to send to the isolation worker "
                         f"({exc}); define it in a Python file") from exc
    text = textwrap.dedent("".join(lines))
    node = ast.parse(text).body[0]
    if not isinstance(node, ast.FunctionDef):
        raise Unisolated(f"the source of {fn.__qualname__} is not a plain function definition")
    top = node.lineno - 1  # the lines of decorators (and comments) above the ``def``
    head = ["@__tdp_jit__\n"] + ["\n"] * (top - 1) if top else []
    node.decorator_list = []
    return "\n" * (first - 1) + "".join(head + text.splitlines(keepends=True)[top:]), node, bool(top)


def _names(node: ast.FunctionDef) -> list[str]:
    """The free names of a function (its decorators left out): what it reads and never binds."""
    params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    loads, stores = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            (loads if isinstance(sub.ctx, ast.Load) else stores).add(sub.id)
    return sorted(loads - stores - params)
