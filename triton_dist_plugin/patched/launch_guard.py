"""Which compiled kernel a tuned call launches, told from its arguments without Triton's binder.

On every launch Triton's binder builds a dict of every parameter, a list of specialisation tuples
and an options dict, then a cache key from them. For one tuned config the options are fixed, so
what can change the kernel between calls is only what Triton specialises on in the arguments: a
tensor's dtype and 16-byte alignment, an integer's size class, whether it is 1 and whether it is a
multiple of 16, and a constexpr argument's value. A ``Plan`` is generated for the argument kinds of
one call and answers, for a later call of the same kinds, a key made of exactly those facts (each
at least as fine as Triton's own, so two calls with one key always get one kernel) and the values
the launcher is given, a tensor as the device pointer the launcher itself would read from it.
Anything else (another kind, a tensor off the device, a subclass Triton treats otherwise, another
number of arguments) gets ``None`` and goes through the binder.

``launcher_for`` calls the C launcher of the Triton releases whose launch sequence is known here,
skipping ``CudaLauncher.__call__`` when the kernel needs no scratch memory; otherwise it calls
``kernel.run`` as Triton does. Hooks are the caller's business: it uses neither with them set.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .. import _compat

#: Releases whose specialisation the guard's key is checked against (tests/test_launch_guard.py).
GUARDED_RELEASES = {(3, 6), (3, 8), (3, 9)}
#: The C launcher's argument order, by release: one module per kernel (3.6), one shared (3.8+).
_C_LAUNCH = {(3, 6): "per_kernel", (3, 8): "shared", (3, 9): "shared"}
#: Most plans one launcher keeps (one per mix of argument kinds: an optional pointer given or None),
#: and most entries one plan keeps (a NaN constexpr never finds its own entry again).
MOST_PLANS = 4
MOST_ENTRIES = 1024
#: The tensor attribute that says its pointer is the device's (the launcher's own check, done here).
DEVICE_ATTR = "is_cuda"

_I32, _I64, _U64 = 2**31, 2**63, 2**64


#: The keywords every launch carries besides the kernel's arguments (``JITFunction.run`` requires both).
LAUNCH_KEYWORDS = ("grid", "warmup")


@dataclass(frozen=True)
class Plan:
    """For calls with ``arity`` positional arguments and the kernel arguments ``names`` by keyword,
    of ``kinds`` (signature order): ``guard(args, kwargs)`` gives ``(key, values)`` or None,
    ``bound(args, kwargs)`` the parameter dict a callable grid is given. ``entries`` maps this
    plan's keys (with the device and knobs) to what they launch: keys of two plans never meet, as
    one plan's ``None`` or float adds nothing where another's tensor adds two. ``program`` is the
    same guard as data, for ``_hit.c``."""

    arity: int
    names: tuple
    kinds: tuple
    guard: Callable[[tuple, dict], Optional[tuple]]
    bound: Callable[[tuple, dict], dict]
    entries: dict = field(default_factory=dict, compare=False)
    program: Optional[tuple] = field(default=None, compare=False)


def _tensor_types() -> frozenset:
    import torch

    return frozenset({torch.Tensor, torch.nn.Parameter})


def _kind(value: Any, constexpr: bool, tensors: frozenset) -> Optional[str]:
    if constexpr:
        return "constexpr"
    if type(value) in tensors:
        return "tensor"
    if value is None:
        return "none"
    return {int: "int", bool: "bool", float: "float"}.get(type(value))


def _sources(fn: Any, meta: dict, arity: int, names: frozenset) -> tuple[list, str]:
    """Each parameter's source in signature order: ``("arg", i)``, ``("kw", name)`` or ``("const", value)``."""
    parameters = list(fn.signature.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in parameters):
        return [], "the kernel takes *args, **kwargs or keyword-only parameters"
    if arity > len(parameters):
        return [], "more arguments than parameters"
    unknown = names - {p.name for p in parameters[arity:]}
    if unknown:
        return [], f"{sorted(unknown)[0]} is not a parameter left after the positional arguments"
    sources = []
    for i, parameter in enumerate(parameters):
        if parameter.name in meta and (i < arity or parameter.name in names):
            return [], f"{parameter.name} is given twice"
        if i < arity:
            sources.append(("arg", i))
        elif parameter.name in names:
            sources.append(("kw", parameter.name))
        elif parameter.name in meta:
            sources.append(("const", meta[parameter.name]))
        elif parameter.default is not inspect.Parameter.empty:
            sources.append(("const", parameter.default))
        else:
            return [], f"{parameter.name} is missing"
    return sources, ""


def kinds_of(fn: Any, args: tuple, kwargs: Optional[dict] = None) -> tuple:
    """The kind of each argument given, in signature order (None where the guard cannot tell
    Triton's specialisation); ``kwargs`` are the launch's keywords, ``grid`` and ``warmup`` among them."""
    tensors, kwargs = _tensor_types(), kwargs or {}
    return tuple(_kind(args[i] if i < len(args) else kwargs[p.name], p.is_constexpr, tensors)
                 for i, p in enumerate(fn.params) if i < len(args) or p.name in kwargs)


def build(fn: Any, meta: dict, args: tuple, backend: Any, kwargs: Optional[dict] = None,
          device_attr: Optional[str] = None) -> tuple[Optional[Plan], str]:
    """A plan for calls shaped like ``args`` and ``kwargs`` (the launch's keywords, ``grid`` and
    ``warmup`` among them; ``meta``: the config's launch keywords; ``backend``: the compiler backend
    of the device's cache, whose specialisation the plan must match), or ``(None, why)``.
    ``device_attr``: the tensor attribute checked in place of ``DEVICE_ATTR``."""
    kwargs = {"grid": None, "warmup": False} if kwargs is None else kwargs
    if _compat.TRITON_VERSION not in GUARDED_RELEASES:
        return None, "this Triton release's specialisation is not checked here"
    if getattr(getattr(backend, "target", None), "backend", None) != "cuda" or getattr(
            backend, "supports_native_tensor_specialization", False) is not True:
        return None, "the backend specialises tensors beyond their dtype and alignment"
    if any(k not in kwargs for k in LAUNCH_KEYWORDS):
        return None, "a launch without grid and warmup keywords"
    names = frozenset(kwargs).difference(LAUNCH_KEYWORDS)
    sources, why = _sources(fn, meta, len(args), names)
    if why:
        return None, why
    kinds = kinds_of(fn, args, kwargs)
    if None in kinds:
        return None, f"argument {kinds.index(None)} is of a kind Triton specialises otherwise"
    namespace: dict = {"_T": _tensor_types()}
    text = _source([p.name for p in fn.params], sources, kinds, (len(args), len(kwargs)),
                   device_attr or DEVICE_ATTR, namespace)
    exec(text, namespace)  # noqa: S102
    try:
        found = namespace["guard"](args, kwargs)
    except Exception as exc:  # noqa: BLE001 - e.g. a tensor without storage: the binder's path says so
        return None, f"the guard cannot read the arguments ({type(exc).__name__})"
    if found is None:
        return None, "a tensor argument is not on the device"
    ordered = tuple(name for source, name in sources if source == "kw")
    program = _program(sources, kinds, (len(args), len(kwargs)), device_attr or DEVICE_ATTR,
                       tuple(p.name for p in fn.params))
    return Plan(len(args), ordered, kinds, namespace["guard"], namespace["bound"], program=program), ""


#: ``_hit.c``'s operation codes.
_OPS = {"const": 0, "tensor": 1, "int": 2, "none": 3, "constexpr": 4, "bool": 5, "float": 6}


def _program(sources: list, kinds: tuple, counts: tuple, device_attr: str, names: tuple) -> tuple:
    """``(arity, device attribute, ops, keyword count, names)``: ``_source``'s guard and ``bound`` as
    data, one ``(code, argument index, keyword name or constant)`` per parameter in signature order
    (``counts``: how many positional arguments and keywords a call of this shape has; ``names``: the
    parameters' names, the keys of ``bound``'s dict)."""
    given = iter(kinds)
    ops = tuple((_OPS["const" if source == "const" else next(given)], what) for source, what in sources)
    return (counts[0], device_attr, ops, counts[1], tuple(str(n) for n in names))


def _tuple(items: list) -> str:
    return f"({', '.join(items)},)" if items else "()"


def _source(names: list, sources: list, kinds: tuple, counts: tuple, device_attr: str, namespace: dict) -> str:
    """The guard and bound functions' text, generated from the kernel's signature (as Triton's binder
    is); ``counts``: how many positional arguments and keywords a call of this shape has."""
    checks, on_device, pointers, key, values, bound, reads = [], [], [], [], [], [], []
    given = iter(kinds)
    for i, (name, (source, what)) in enumerate(zip(names, sources)):
        if source == "const":
            namespace[f"c{i}"] = what
            values.append(f"c{i}")
            bound.append(f"{name!r}: c{i}")
            continue
        a, kind = f"a{i}", next(given)
        if source == "kw":
            reads.append(f"    {a} = kw[{what!r}]")  # a missing keyword: KeyError, the caller's None
        bound.append(f"{name!r}: {a}")
        values.append(a)
        if kind == "tensor":
            checks.append(f"type({a}) not in _T")
            on_device.append(f"{a}.{device_attr}")
            pointers.append(f"    p{i} = {a}.data_ptr()")
            key += [f"{a}.dtype", f"p{i} & 15 == 0"]
            values[-1] = f"p{i}"
        elif kind == "int":  # Triton's facts: value 1, multiple of 16, i32 / i64 / u64 / too large
            checks.append(f"type({a}) is not int")
            key += [f"{a} == 1", f"{a} & 15 == 0", f"0 if {-_I32} <= {a} < {_I32} else 1 if {-_I64} <= {a} < {_I64} "
                    f"else 2 if 0 <= {a} < {_U64} else 3"]
        elif kind == "none":
            checks.append(f"{a} is not None")
        elif kind == "constexpr":
            key.append(a)
        else:
            checks.append(f"type({a}) is not {kind}")
    arity, keywords = counts
    unpack = [f"    {''.join(f'a{i}, ' for i in range(arity))}= args"] if arity else []
    lines = ["def guard(args, kw):", f"    if len(args) != {arity} or len(kw) != {keywords}:", "        return None",
             *unpack, *reads]
    if checks:
        lines += [f"    if {' or '.join(checks)}:", "        return None"]
    if on_device:
        lines += [f"    if not ({' and '.join(on_device)}):", "        return None"]
    lines += [*pointers, f"    return {_tuple(key)}, {_tuple(values)}", "def bound(args, kw):", *unpack, *reads,
              f"    return {{{', '.join(bound)}}}"]
    return "\n".join(lines)


def launcher_for(kernel: Any) -> tuple[Callable[..., None], tuple]:
    """``(launch, spec)`` for a compiled kernel, no hooks: ``launch(grid_0, grid_1, grid_2, stream,
    values)``, and what it calls as data, ``(callable, arguments after the stream, values spread)``:
    the callable is given the grid, the stream, those arguments, then the values (each, or as one
    tuple), which is all ``launch`` does (``_hit.c`` calls it so)."""
    run, function, packed = kernel.run, kernel.function, kernel.packed_metadata
    mode = _C_LAUNCH.get(_compat.TRITON_VERSION)
    if mode is None or not _plain_cuda_launcher(run):
        target, prefix, spread = run, (function, packed, None, None, None), True
    else:
        target, coop, pdl = run.launch, run.launch_cooperative_grid, run.launch_pdl
        if mode == "per_kernel":
            prefix, spread = (function, coop, pdl, None, None, packed, None, None, None), True
        else:
            prefix = (function, coop, pdl, packed, None, None, None, None, None, run.arg_annotations,
                      run.kernel_signature)
            spread = False
    if spread:
        def launch(g0, g1, g2, stream, values):
            target(g0, g1, g2, stream, *prefix, *values)
    else:
        def launch(g0, g1, g2, stream, values):
            target(g0, g1, g2, stream, *prefix, values)
    return launch, (target, prefix, spread)


def _plain_cuda_launcher(run: Any) -> bool:
    """True for Triton's own CUDA launcher of a kernel needing no scratch, sanitizer or descriptors,
    whose ``__call__`` then only forwards to its C ``launch``."""
    klass = type(run)
    return (klass.__name__ == "CudaLauncher" and klass.__module__ == "triton.backends.nvidia.driver"
            and type(getattr(run, "launch", None)).__name__ == "builtin_function_or_method"
            and getattr(run, "global_scratch_size", 1) == 0 and getattr(run, "profile_scratch_size", 1) == 0
            and not getattr(run, "gsan_enabled", False))
