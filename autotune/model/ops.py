"""Arithmetic backends for the cost formulas.

The cost model (``model/formulas.py``) is written once against this small interface and
evaluated three ways: on Python ints (``analyze``), on numpy arrays over every candidate
mapping at once (exhaustive search), and as CP-SAT constraints (the integer program, in
``search/ilp``). All arithmetic is on non-negative integers with explicit floor/ceil division,
so the three backends compute exactly the same numbers and the integer program's optimum can
be checked against enumeration.

``+``, ``-`` and multiplication by an ``int`` constant use Python operators; everything
non-linear goes through the backend.
"""

from __future__ import annotations

from functools import reduce
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

#: What the formula computes with: a Python int, an int64 numpy array (one entry per candidate
#: mapping) or, in the integer program, a CP-SAT expression (``search.ilp.ops.Expr``).
Value = Any

#: A table of integers indexed by a ``Value`` (``Ops.lookup``).
Table = npt.NDArray[np.int64]


class Ops(Protocol):
    """The interface the formula is written against (``NumpyOps``, ``ilp.ops.CpSatOps``)."""

    def mul(self, a: Value, b: Value) -> Value:
        """a x b."""
        ...

    def cdiv(self, a: Value, b: Value) -> Value:
        """ceil(a / b) for a >= 0, b >= 1."""
        ...

    def max(self, *xs: Value) -> Value: ...

    def min(self, *xs: Value) -> Value: ...

    def choose(self, index: Value, options: list[Value]) -> Value:
        """options[index] (elementwise)."""
        ...

    def lookup(self, index: Value, table: Table) -> Value:
        """table[index] (elementwise)."""
        ...


class NumpyOps:
    """Evaluate on ints or int64 arrays (broadcasting)."""

    def mul(self, a: Any, b: Any) -> Any:
        return a * b

    def cdiv(self, a: Any, b: Any) -> Any:
        """ceil(a / b) for a >= 0, b >= 1."""
        return -(-a // b)

    def max(self, *xs: Any) -> Any:
        return reduce(np.maximum, xs)

    def min(self, *xs: Any) -> Any:
        return reduce(np.minimum, xs)

    def choose(self, index: Any, options: list[Any]) -> Any:
        """options[index] (elementwise)."""
        if len(options) == 1:
            return options[0]
        if np.isscalar(index) or np.ndim(index) == 0:
            return options[int(index)]
        return np.choose(index, [np.broadcast_to(o, np.shape(index)) for o in options])

    def lookup(self, index: Any, table: Table) -> Any:
        return table[index]

    def finish(self, value: Any) -> Any:
        return value


def as_int(value: Any) -> int:
    return int(np.asarray(value).item())
