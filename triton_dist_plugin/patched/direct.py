"""Launch a tuned config's compiled kernel without redoing what cannot have changed.

On a cache hit ``JITFunction.run`` rebuilds the compile options from knobs, turns them into a
string for its kernel-cache key and looks the kernel up, on every launch. For one tuned config
those options change only if a knob does, so a ``Launcher`` keeps its own table from
(specialization, knob values) to the compiled kernel that ``JITFunction.run`` itself chose, and
fills it by calling ``JITFunction.run`` on a miss. Once Triton's binder has confirmed an entry,
calls of the same argument kinds skip the binder too: a ``launch_guard`` plan tells their kernel
from the facts Triton specialises on, and the kernel is launched through Triton's C launcher with
the tensors' device pointers. Launch metadata is built, and launch hooks called, only when a hook
listens (Triton 3.6+ keeps an empty hook chain in place of ``None``).

It is used only for plain ``JITFunction`` kernels on a GPU driver, on the Triton releases whose
launch sequence is known (3.4 to 3.9), and only after a check, made whenever an entry is added,
that this Triton builds the same kernel-cache key from the knobs read here. Anything else, or
anything unusual on a call (pre-run hooks, global values the kernel captured, a stage-inspection
hook), goes through ``JITFunction.run`` unchanged. ``TRITON_DIST_DIRECT_LAUNCH=0`` turns it off.
"""

from __future__ import annotations

import operator
from typing import Any, Optional

from .. import _compat, settings
from . import launch_guard

DIRECT_ENV = "TRITON_DIST_DIRECT_LAUNCH"
#: Releases whose ``JITFunction.run`` launch sequence this module follows.
KNOWN_RELEASES = {(3, 4), (3, 5), (3, 6), (3, 7), (3, 8), (3, 9)}
#: Why the last launcher fell back for good (for diagnostics and benchmarks).
refusals: dict[str, str] = {}
#: Why a kernel's calls could not get a launch guard (they stay on the binder's path; diagnostics).
guard_refusals: dict[str, str] = {}
#: Plans a launcher tries to build, in all.
_MOST_ATTEMPTS = 8


#: Triton's launch-hook chain (3.6+): an empty one has no listener, so it and its metadata are skipped.
_CHAIN = getattr(_compat.knobs, "HookChain", type("NoHookChain", (), {}))


def _named(kwargs: dict) -> dict:
    """The kernel arguments among a launch's keywords."""
    return {k: v for k, v in kwargs.items() if k != "grid" and k != "warmup"} if len(kwargs) > 2 else {}


def _compilation_knobs() -> list[str]:
    """Compilation knobs that ``JITFunction.run`` copies into the options besides ``debug``."""
    group = _compat.knobs.compilation
    return [name for name in ("instrumentation_mode", "fpsan_homomorphic_casts") if hasattr(group, name)]


def releases_usable() -> bool:
    """True where this module launches kernels at all: a GPU driver of a known Triton release, and the setting."""
    if _compat.knobs is None or _compat.TRITON_VERSION not in KNOWN_RELEASES or _compat.IS_ASCEND:
        return False
    return bool(settings.value(DIRECT_ENV)) and not _compat.interpret()


def usable(fn: Any) -> bool:
    """True when ``fn`` is a plain ``JITFunction`` this module knows how to launch."""
    if not releases_usable():
        return False
    from triton.runtime.jit import JITFunction

    return type(fn).run is JITFunction.run and hasattr(fn, "device_caches")


class Launcher:
    """Launches ``fn`` with one config's keywords (``meta``); see the module docstring."""

    __slots__ = ("fn", "meta", "table", "off", "plans", "attempts", "_driver", "_runtime", "_compilation",
                 "_names", "_read", "_stage_hook", "_torch_device", "_raw_device", "c_state")

    def __init__(self, fn: Any, meta: dict):
        from triton.runtime.driver import driver

        self.fn, self.meta = fn, meta
        self.table: dict = {}
        self.plans: tuple = ()  # launch_guard plans, one per mix of argument kinds seen
        self.attempts = 0  # plans tried to build (a refused or off-device call spends one)
        self.off = "debug" in meta  # an explicit debug option is rare; let Triton handle it
        self._driver = driver
        self._runtime = _compat.knobs.runtime
        self._compilation = _compat.knobs.compilation
        self._names = _compilation_knobs()
        self._read = operator.attrgetter(*self._names) if self._names else (lambda _: None)
        self._stage_hook = hasattr(self._runtime, "add_stages_inspection_hook")
        # Triton's CUDA driver asks torch.cuda.current_device, a Python function around torch's C
        # call, which itself initialises CUDA where needed (and raises in a child forked after
        # CUDA was initialised): while that is the driver's, the guard's path asks the C call.
        import torch

        self._torch_device = torch.cuda.current_device
        self._raw_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
        # What ``_hit.c`` reads of this launcher, in one attribute (its ``launch`` follows ``__call__``).
        self.c_state = (fn, self._runtime, driver, self._torch_device, self._raw_device, self._read,
                        self._compilation, self._stage_hook)

    def _options(self) -> dict:
        """The options ``JITFunction.run`` adds to the config's keywords, in its order."""
        values = self._read(self._compilation)
        values = (values,) if len(self._names) == 1 else values or ()
        return {"debug": self.fn.debug or self._runtime.debug, **dict(zip(self._names, values))}

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        """Launch with the positional ``args`` and the launch's keywords ``kwargs`` (``grid``,
        ``warmup`` false, and any kernel arguments given by keyword)."""
        fn, runtime = self.fn, self._runtime
        if self.off or fn.pre_run_hooks or fn.used_global_vals or (
                self._stage_hook and runtime.add_stages_inspection_hook is not None):
            return fn.run(*args, **kwargs, **self.meta)
        enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
        if not ((enter is None or (type(enter) is _CHAIN and not enter.calls)) and (
                leave is None or (type(leave) is _CHAIN and not leave.calls))):
            return self._bound(args, kwargs, heard=True)[0]  # someone listens: Triton's hooks and metadata
        for plan in self.plans:
            try:
                found = plan.guard(args, kwargs)
            except Exception:  # noqa: BLE001 - another keyword, a tensor without storage: the binder's path
                found = None
            if found is not None:
                break
        else:
            return self._bound(args, kwargs, plan=True)[0]
        # The guard's key tells the kernel: no binder, no cache key, no metadata.
        active = self._driver.active
        current = active.get_current_device
        device = self._raw_device() if current is self._torch_device else current()
        caches = fn.device_caches[device]
        try:
            hit = plan.entries.get((found[0], device, fn.debug or runtime.debug, self._read(self._compilation)))
        except TypeError:  # an unhashable constexpr value
            return fn.run(*args, **kwargs, **self.meta)
        if hit is None or hit[0] is not caches:
            return self._learn(plan, found[0], args, kwargs)
        stream = active.get_current_stream(device)
        grid = kwargs["grid"]
        if callable(grid):
            grid = grid(plan.bound(args, kwargs))
        size = len(grid)
        hit[1](grid[0], grid[1] if size > 1 else 1, grid[2] if size > 2 else 1, stream, found[1])
        return hit[3]

    def _learn(self, plan: launch_guard.Plan, facts: tuple, args: tuple, kwargs: dict) -> Any:
        """Launch through the binder, and let the guard's ``facts`` serve this kernel from now on
        once the binder's entry for it is confirmed: under the device and knobs the binder read."""
        kernel, entry, key = self._bound(args, kwargs)
        if entry is not None and len(plan.entries) < launch_guard.MOST_ENTRIES:
            plan.entries[(facts, *key[1:])] = (entry[0], *launch_guard.launcher_for(kernel), kernel)
        return kernel

    def _bound(self, args: tuple, kwargs: dict, heard: bool = False, plan: bool = False) -> tuple:
        """A launch through Triton's binder: ``(kernel, table entry or None, its key)``. Launch hooks
        and their metadata are Triton's when someone listens (``heard``), else left out; ``plan``:
        no plan serves calls like this one, so learn one if its kernel is confirmed."""
        fn, runtime, active = self.fn, self._runtime, self._driver.active
        device = active.get_current_device()
        caches = fn.device_caches[device]
        named = _named(kwargs)
        bound, spec, _ = caches[-1](*args, **named, **self.meta)
        try:
            key = (tuple(spec), device, fn.debug or runtime.debug, self._read(self._compilation))
            hit = self.table.get(key)
        except TypeError:  # an unhashable constexpr value
            return fn.run(*args, **kwargs, **self.meta), None, None
        if hit is None or hit[0] is not caches:
            kernel = fn.run(*args, **kwargs, **self.meta)
            self._add(key, caches, args, named, kernel)
            return kernel, self.table.get(key), key
        _, kernel, function, packed, run = hit
        if plan:
            self._plan(args, kwargs, caches)
        stream = active.get_current_stream(device)
        grid = kwargs["grid"]
        if callable(grid):
            grid = grid(bound)
        size = len(grid)
        values = bound.values()
        if heard:
            enter, leave, metadata = runtime.launch_enter_hook, runtime.launch_exit_hook, kernel.launch_metadata(
                grid, stream, *values)
        else:
            enter = leave = metadata = None
        run(grid[0], grid[1] if size > 1 else 1, grid[2] if size > 2 else 1, stream, function, packed, metadata,
            enter, leave, *values)
        return kernel, hit, key

    def _plan(self, args: tuple, kwargs: dict, caches: tuple) -> None:
        """Learn a plan for this call's argument kinds, once its kernel has been confirmed; a few
        tries in all, so that a call the guard cannot serve costs the binder's path nothing more."""
        if self.attempts >= _MOST_ATTEMPTS or len(self.plans) >= launch_guard.MOST_PLANS:
            return
        self.attempts += 1
        plan, why = launch_guard.build(self.fn, self.meta, args, caches[-2], kwargs)
        if plan is None:
            guard_refusals[getattr(self.fn, "__name__", repr(self.fn))] = why
        elif (plan.arity, plan.names, plan.kinds) not in [(p.arity, p.names, p.kinds) for p in self.plans]:
            self.plans += (plan,)

    def _add(self, key: tuple, caches: tuple, args: tuple, named: dict, kernel: Any) -> None:
        """Remember ``kernel`` for ``key`` once Triton's own cache key confirms it is the one."""
        problem = self._check(caches, args, named, kernel)
        if problem is None:
            if len(self.table) < launch_guard.MOST_ENTRIES:
                self.table[key] = (caches, kernel, kernel.function, kernel.packed_metadata, kernel.run)
        else:
            self.off = True
            refusals[getattr(self.fn, "__name__", repr(self.fn))] = problem

    def _check(self, caches: tuple, args: tuple, named: dict, kernel: Any) -> Optional[str]:
        if getattr(kernel, "function", None) is None or not hasattr(kernel, "packed_metadata"):
            return "the launched kernel has no loaded function"
        _, spec, options = caches[-1](*args, **named, **self.meta, **self._options())
        if len(caches) == 5:  # 3.5+: (kernel cache, key cache, target, backend, binder)
            from triton.runtime.jit import compute_cache_key

            cache_key = compute_cache_key(caches[1], spec, options)
        else:  # 3.4: (kernel cache, target, backend, binder)
            cache_key = str(spec) + str(options)
        if caches[0].get(cache_key) is not kernel:
            return "this Triton's kernel-cache key differs from the one rebuilt here"
        return None
