"""CP-SAT backend for the cost formula: each non-linear step becomes a constraint.

Values are Python ints (constants, folded) or ``Expr``: a linear expression with integer
bounds. Sums, differences and products with constants stay linear; ``mul`` of two variables,
ceil/floor division, ``max``/``min``, table lookups (``add_element``) and algorithm selection
(enforced equalities) create a new variable with bounds derived from its operands. All
quantities in the formula are non-negative, which keeps interval products simple and exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

#: CP-SAT works on 64-bit integers. Interval bounds of products compound (the largest phase
#: count times the largest task time of *different* candidates), so bounds are clamped here;
#: every value a real candidate takes is far below (exhaustive search asserts it), so the
#: clamp removes no candidate.
LIMIT = 1 << 60


@dataclass
class Expr:
    expr: Any  # cp_model linear expression or variable
    lo: int
    hi: int

    def __add__(self, other: Any) -> Expr:
        if isinstance(other, Expr):
            return Expr(self.expr + other.expr, self.lo + other.lo, self.hi + other.hi)
        return Expr(self.expr + int(other), self.lo + int(other), self.hi + int(other))

    __radd__ = __add__

    def __sub__(self, other: Any) -> Expr:
        if isinstance(other, Expr):
            return Expr(self.expr - other.expr, self.lo - other.hi, self.hi - other.lo)
        return Expr(self.expr - int(other), self.lo - int(other), self.hi - int(other))

    def __rsub__(self, other: Any) -> Expr:
        return Expr(int(other) - self.expr, int(other) - self.hi, int(other) - self.lo)

    def __mul__(self, other: Any) -> Expr:
        c = int(other)
        if c >= 0:
            return Expr(self.expr * c, self.lo * c, self.hi * c)
        return Expr(self.expr * c, self.hi * c, self.lo * c)

    __rmul__ = __mul__


class CpSatOps:
    """Build the formula into ``cpm``; ``index_vars`` are the decision variables."""

    def __init__(self, cpm: cp_model.CpModel) -> None:
        self.cpm = cpm
        self.count = 0
        self._eq_literals: dict[tuple[int, int], Any] = {}

    # -- helpers -------------------------------------------------------------------------
    def var(self, lo: int, hi: int, name: str = "t") -> Expr:
        lo, hi = max(int(lo), -LIMIT), min(int(hi), LIMIT)
        self.count += 1
        return Expr(self.cpm.new_int_var(lo, hi, f"{name}{self.count}"), lo, hi)

    def _as_var(self, x: Expr) -> Any:
        if isinstance(x.expr, cp_model.IntVar):
            return x.expr
        v = self.var(x.lo, x.hi, "lin")
        self.cpm.add(v.expr == x.expr)
        return v.expr

    def literal_equals(self, x: Expr, value: int) -> Any:
        """A Boolean literal true iff variable ``x == value`` (cached per variable)."""
        var = self._as_var(x)
        key = (var.index, int(value))
        if key not in self._eq_literals:
            lit = self.cpm.new_bool_var(f"{var.name}=={value}")
            self.cpm.add(var == value).only_enforce_if(lit)
            self.cpm.add(var != value).only_enforce_if(~lit)
            self._eq_literals[key] = lit
        return self._eq_literals[key]

    # -- the ops interface -----------------------------------------------------------------
    def mul(self, a: Any, b: Any) -> Any:
        if not isinstance(a, Expr) or not isinstance(b, Expr):
            return a * b
        corners = (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)
        t = self.var(min(corners), max(corners), "mul")
        self.cpm.add_multiplication_equality(t.expr, [self._as_var(a), self._as_var(b)])
        return t

    def cdiv(self, a: Any, b: Any) -> Any:
        if not isinstance(a, Expr) and not isinstance(b, Expr):
            return -(-int(a) // int(b))
        if not isinstance(b, Expr):
            b = int(b)
            t = self.var(max(0, -(-a.lo // b)), max(0, -(-a.hi // b)), "cdiv")
            self.cpm.add_division_equality(t.expr, self._as_var(a + (b - 1)), b)
            return t
        if b.lo < 1:
            raise ValueError("division by a variable that can be zero")
        num = a + b - 1 if isinstance(a, Expr) else b + (int(a) - 1)
        lo = max(0, (a.lo if isinstance(a, Expr) else int(a)) // b.hi)
        hi = -(-(a.hi if isinstance(a, Expr) else int(a)) // b.lo)
        t = self.var(lo, hi, "cdiv")
        self.cpm.add_division_equality(t.expr, self._as_var(num), self._as_var(b))
        return t

    def _extreme(self, xs: tuple[Any, ...], is_max: bool) -> Any:
        consts = [int(x) for x in xs if not isinstance(x, Expr)]
        exprs = [x for x in xs if isinstance(x, Expr)]
        if not exprs:
            return max(consts) if is_max else min(consts)
        if consts:
            c = max(consts) if is_max else min(consts)
            exprs.append(Expr(c, c, c))
        pick = max if is_max else min
        lo, hi = pick(e.lo for e in exprs), pick(e.hi for e in exprs)
        t = self.var(lo, hi, "max" if is_max else "min")
        targets = [e.expr for e in exprs]
        if is_max:
            self.cpm.add_max_equality(t.expr, targets)
        else:
            self.cpm.add_min_equality(t.expr, targets)
        return t

    def max(self, *xs: Any) -> Any:
        return self._extreme(xs, True)

    def min(self, *xs: Any) -> Any:
        return self._extreme(xs, False)

    def choose(self, index: Any, options: list[Any]) -> Any:
        if not isinstance(index, Expr):
            return options[int(index)]
        used = list(range(index.lo, index.hi + 1))
        picked = [options[i] for i in used]
        if all(not isinstance(o, Expr) for o in picked):
            table = [
                int(options[i]) if index.lo <= i <= index.hi else 0 for i in range(len(options))
            ]
            return self.lookup(index, np.asarray(table))
        lo = min(o.lo if isinstance(o, Expr) else int(o) for o in picked)
        hi = max(o.hi if isinstance(o, Expr) else int(o) for o in picked)
        t = self.var(lo, hi, "choose")
        for i in used:
            option = options[i]
            rhs = option.expr if isinstance(option, Expr) else int(option)
            self.cpm.add(t.expr == rhs).only_enforce_if(self.literal_equals(index, i))
        return t

    def lookup(self, index: Any, table: np.ndarray) -> Any:
        if not isinstance(index, Expr):
            return int(table[int(index)])
        values = [int(v) for v in table]
        lo_i, hi_i = max(index.lo, 0), min(index.hi, len(values) - 1)
        window = values[lo_i : hi_i + 1]
        if min(window) == max(window):
            return window[0]
        t = self.var(min(window), max(window), "tab")
        self.cpm.add_element(self._as_var(index), values, t.expr)
        return t

    def finish(self, value: Any) -> Any:
        return value
