"""What a kernel's source says about its ``tl.constexpr`` parameters.

A constexpr is a *tiling parameter* when it sizes a block: ``tl.arange(0, C)``, or a shape in
``tl.zeros``/``tl.full``. Its role then follows from how the block is placed:

``program``  multiplied by something derived from ``tl.program_id``: the extent is split across
             programs (``offs = pid * BLOCK + tl.arange(0, BLOCK)``)
``loop``     the step of a loop, or counted by one (``range(0, N, BLOCK)``,
             ``range(tl.cdiv(K, BLOCK_K))``): the extent is walked in steps
``whole``    neither: one block must cover the whole extent (a reduced row), so the block is
             at least the next power of two of it

The *extent* is the kernel argument the block is checked against: a mask ``offs < n``, a loop
bound, or ``tl.cdiv(n, BLOCK)``. Other constexprs are not tiling parameters.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Optional

from .. import _compat


@dataclass
class Tile:
    name: str
    role: str  # "program", "loop" or "whole"
    extent: Optional[str]  # the kernel argument it tiles, when found
    dims: int = 1  # how many block dimensions it sizes (2-D tiles count twice in memory use)


@dataclass
class Analysis:
    params: list  # every parameter name, in order
    constexprs: dict  # name -> has a default
    tiles: dict = field(default_factory=dict)  # name -> Tile
    uses_dot: bool = False
    reductions: bool = False

    def tiling(self) -> list[str]:
        return list(self.tiles)


def _is_constexpr(annotation: Optional[ast.expr]) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return text.endswith("constexpr")


def _names(node: ast.AST) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _call_name(node: ast.AST) -> str:
    return ast.unparse(node.func).split(".")[-1] if isinstance(node, ast.Call) else ""


class _Walker(ast.NodeVisitor):
    """One pass over the body: taint from program ids, aranges and loops, then roles."""

    def __init__(self, params: list, constexprs: dict):
        self.params, self.constexprs = set(params), constexprs
        self.pid: set = set()  # variables derived from tl.program_id
        self.arange_of: dict = {}  # variable -> constexprs whose arange it derives from
        self.loop_vars: set = set()
        self.sizes: set = set()  # constexprs that size a block
        self.dims: dict = {}
        self.program: set = set()
        self.loop: set = set()
        self.extent: dict = {}
        self.uses_dot = False
        self.reductions = False

    # -- taint ---------------------------------------------------------------------------------
    def _pid_expr(self, node: ast.AST) -> bool:
        return any(_call_name(n) == "program_id" for n in ast.walk(node)) or bool(_names(node) & self.pid)

    def _aranges_in(self, node: ast.AST) -> set:
        found = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and _call_name(n) == "arange" and len(n.args) >= 2:
                found |= _names(n.args[1]) & self.constexprs.keys()
            if isinstance(n, ast.Name) and n.id in self.arange_of:
                found |= self.arange_of[n.id]
        return found

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        self._assign([t for t in node.targets], node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.generic_visit(node)
        self._assign([node.target], node.value, augment=True)

    def _assign(self, targets: list, value: ast.AST, augment: bool = False) -> None:
        names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if self._pid_expr(value):
            self.pid |= names
        aranges = self._aranges_in(value)
        if aranges:
            for name in names:
                self.arange_of[name] = self.arange_of.get(name, set()) | aranges if augment else aranges

    def visit_For(self, node: ast.For) -> None:
        if isinstance(node.iter, ast.Call) and _call_name(node.iter) in ("range", "static_range"):
            args = node.iter.args
            step = args[2] if len(args) >= 3 else None
            bound = args[1] if len(args) >= 2 else args[0] if args else None
            if step is not None:
                for c in _names(step) & self.constexprs.keys():
                    self.loop.add(c)
                    self._link(c, bound)
            for n in ast.walk(bound) if bound is not None else ():
                if isinstance(n, ast.Call) and _call_name(n) == "cdiv" and len(n.args) == 2:
                    for c in _names(n.args[1]) & self.constexprs.keys():
                        self.loop.add(c)
                        self._link(c, n.args[0])
            self.loop_vars |= _names(node.target)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _call_name(node)
        if name == "arange" and len(node.args) >= 2:
            self.sizes |= _names(node.args[1]) & self.constexprs.keys()
        if name in ("zeros", "full", "empty") and node.args:
            shape = node.args[0]
            elts = shape.elts if isinstance(shape, (ast.List, ast.Tuple)) else [shape]
            for e in elts:
                for c in _names(e) & self.constexprs.keys():
                    self.sizes.add(c)
                    self.dims[c] = max(self.dims.get(c, 1), 1)
            if len(elts) > 1:
                for e in elts:
                    for c in _names(e) & self.constexprs.keys():
                        self.dims[c] = len(elts)
        if name == "dot":
            self.uses_dot = True
        if name in ("sum", "max", "min", "reduce", "argmax", "argmin"):
            self.reductions = True
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Mult):
            for a, b in ((node.left, node.right), (node.right, node.left)):
                consts = _names(a) & self.constexprs.keys() if isinstance(a, ast.Name) else set()
                if consts and self._pid_expr(b):
                    self.program |= consts
                if consts and _names(b) & self.loop_vars:
                    self.loop |= consts
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        # offs < n: link the block sizing ``offs`` to the first kernel argument on the other side
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Lt, ast.LtE)):
            for c in self._aranges_in(node.left):
                self._link(c, node.comparators[0])
        self.generic_visit(node)

    def _link(self, const: str, expr: Optional[ast.AST]) -> None:
        if expr is None or const in self.extent:
            return
        args = [n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in self.params
                and n.id not in self.constexprs]
        if args:
            self.extent[const] = args[0]


def analyse(fn) -> Analysis:
    """Analyse a ``@triton.jit`` kernel (or any wrapper of one)."""
    base = _compat.base_function(fn)
    tree = ast.parse(textwrap.dedent(inspect.getsource(base)))
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    args = func.args.args
    defaults = [None] * (len(args) - len(func.args.defaults)) + list(func.args.defaults)
    params = [a.arg for a in args]
    constexprs = {a.arg: d is not None for a, d in zip(args, defaults) if _is_constexpr(a.annotation)}
    walker = _Walker(params, constexprs)
    for stmt in func.body:
        walker.visit(stmt)
    result = Analysis(params, constexprs, uses_dot=walker.uses_dot, reductions=walker.reductions)
    for c in params:
        if c not in walker.sizes:
            continue
        role = "loop" if c in walker.loop else "program" if c in walker.program else "whole"
        result.tiles[c] = Tile(c, role, walker.extent.get(c), walker.dims.get(c, 1))
    return result
