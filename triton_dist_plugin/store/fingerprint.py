"""What a stored pick depends on beyond its kernel, hardware and key, as Triton's own disk cache
of tuning results (``cache_results``) keys it: the hash of Triton itself, the backend's hash (its
compiler and tool versions), and the environment variables that change compilation; and where
Triton keeps its cache, which the plugin's kernel-level picks share by default.

Each is looked up once per process (Triton memoises the first two as well): a running process
does not change what it has loaded, and every stored or checked entry needs them.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

from .. import _compat, policy, settings
from ..search import strategy as search


@functools.lru_cache(maxsize=1)
def triton_hash() -> str:
    """Triton's ``triton_key()`` (its sources and compiled library) where kernels compile; under
    the interpreter, which compiles nothing, the version and its installed files' own hashes
    (the distribution's ``RECORD``: the same on every machine with the same build, without
    reading hundreds of MB), else the size of each source file. Bytecode caches never count:
    they are written as modules are first imported."""
    if not _compat.interpret():
        try:
            return hashlib.sha256(_compat.triton_key().encode()).hexdigest()
        except Exception:  # noqa: BLE001 - a release without it: the files below tell the same
            pass
    import triton

    h = hashlib.sha256(f"interpreter {triton.__version__}".encode())
    record = _installed_record()
    if record is not None:
        h.update(record.encode())
        return h.hexdigest()
    top = Path(triton.__file__).parent
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            try:
                size = os.stat(os.path.join(folder, name), follow_symlinks=False).st_size
            except OSError:
                continue
            h.update(f"{os.path.relpath(os.path.join(folder, name), top)} {size}\n".encode())
    return h.hexdigest()


def _installed_record() -> Any:
    """The ``RECORD`` of the distribution that provides ``triton`` (upstream's or Triton-Ascend's),
    less its bytecode lines; None where none is found (a source checkout)."""
    from importlib import metadata

    for dist in ("triton", "triton-ascend"):
        try:
            text = metadata.distribution(dist).read_text("RECORD")
        except metadata.PackageNotFoundError:
            continue
        if text:
            return "\n".join(sorted(line for line in text.splitlines() if ".pyc," not in line))
    return None


@functools.cache
def backend_hash(device: str) -> str:
    """The active backend's ``hash()`` (ptxas and CUDA versions, target architecture), as
    upstream's ``cache_results`` keys on; ``"interpreter"`` on the CPU."""
    if _compat.interpret() or device == "cpu":
        return "interpreter"
    try:
        from triton.compiler.compiler import make_backend
        from triton.runtime.driver import driver

        return str(make_backend(driver.active.get_current_target()).hash())
    except Exception as exc:  # noqa: BLE001 - keyed on the failure: the same here, another elsewhere
        return f"unknown ({type(exc).__name__})"


def compile_env() -> str:
    """The environment variables that change how Triton compiles, with their values (sorted), as
    Triton's own caches key on them; read at each tuning, since a program may change them."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars

        found: Any = get_cache_invalidating_env_vars()
    except Exception:  # noqa: BLE001 - releases before it: none are known
        found = {}
    return str(sorted(dict(found).items()))


def triton_cache_dir() -> Path:
    """Where Triton keeps its disk cache: ``knobs.cache.dir`` (3.4+), else ``TRITON_CACHE_DIR``,
    else ``$HOME/.triton/cache``, read now (tests and programs move it)."""
    knobs = _compat.knobs
    directory = getattr(getattr(knobs, "cache", None), "dir", None) if knobs is not None else None
    if not directory:
        directory = os.environ.get("TRITON_CACHE_DIR") or os.path.join(
            os.environ.get("HOME") or os.path.expanduser("~"), ".triton", "cache")
    return Path(directory)


def tuning_context(unset: bool = False) -> dict:
    """How a pick was searched for, as kernel and function entries are both keyed on it: the
    search, and the effort where it is not the default (entries stored before there were efforts
    stay valid, and a pick of one effort is served to no less thorough a one: ``thorougher``). ``unset``: what the
    defaults give, whatever the environment says (what an older function entry, which recorded
    neither, is taken to have been tuned under)."""
    if unset:
        return {"search": settings.unset_value(search.SEARCH_ENV)}
    name = policy.current().name
    # A search's own limits, where set, narrow it below its effort: a pick made under them is no
    # more thorough than they allowed, so it serves only lookups under the same (``thorougher``).
    limits = {field: value for field, env in (("search_budget", search.BUDGET_ENV), ("search_whole", search.WHOLE_ENV))
              if (value := settings.value(env)) is not None}
    return {"search": settings.value(search.SEARCH_ENV), **({} if name == "default" else {"effort": name}), **limits}


_EFFORTS = ("full", "default", "quick")  # most thorough first


def thorougher(context: Any) -> list[dict]:
    """``context`` as more thorough tunings would have it (the search ``exhaustive``, the effort
    ``full`` or ``default`` above ``quick``), most thorough first. A pick made so may serve a
    lookup made under ``context``: how hard a search looked is not a check the pick must have
    passed (those, the accuracy check and isolation, stay as they are), and a harder look knows
    no less. So a table a library tuned with ``full`` effort, or every candidate measured, is
    served to a program that tunes with the defaults. Empty for a context without a search."""
    if not isinstance(context, dict) or "search" not in context:
        return []
    search_name, effort = context["search"], context.get("effort", "default")
    if effort not in _EFFORTS:  # an effort this version does not know: nothing is known to be above it
        return []
    floor = _EFFORTS.index(effort)
    out: list[dict] = []
    for name in dict.fromkeys(("exhaustive", search_name)):
        for level in _EFFORTS[:floor + 1]:
            if (name, level) == (search_name, effort):
                continue
            variant = {k: v for k, v in context.items() if k != "effort"}
            variant.update({"search": name, **({} if level == "default" else {"effort": level})})
            out.append(variant)
    return out


def serves(theirs: Any, ours: Any) -> bool:
    """Whether a pick made under the context ``theirs`` may serve a lookup under ``ours``: the
    same, or the same but for a more thorough search (``thorougher``)."""
    return theirs == ours or theirs in thorougher(ours)
