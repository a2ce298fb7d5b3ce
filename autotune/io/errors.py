"""Errors raised for bad input files: each names the file, the layer (if any) and the field."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from autotune.ir.errors import ArgumentsError


class InputError(ArgumentsError, ValueError):
    """A user-supplied file is unreadable or invalid. ``str()`` is one line for the terminal."""

    def __init__(
        self,
        path: str | Path | None,
        message: str,
        *,
        layer: str | None = None,
        field: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.layer = layer
        self.field = field
        self.reason = message
        where = [] if self.path is None else [self.path]
        if layer is not None:
            where.append(f"layer {layer!r}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(": ".join([", ".join(where), message]) if where else message)


def first_validation_error(
    path: str | Path, error: ValidationError, layer_names: Sequence[str | None] | None = None
) -> InputError:
    """Turn pydantic's first error into an ``InputError`` naming the layer and field.

    ``layers.3.kernel`` becomes layer ``<name of layer 3>`` (or ``#3`` when unnamed), field
    ``kernel``; a missing or surplus top-level key becomes that field.
    """
    err = error.errors()[0]
    loc = [str(p) for p in err["loc"]]
    layer = None
    if len(loc) >= 2 and loc[0] == "layers" and loc[1].isdigit():
        index = int(loc[1])
        name = layer_names[index] if layer_names and index < len(layer_names) else None
        layer = name if name else f"#{index}"
        loc = loc[2:]
    # pydantic appends the union member or validator name ('int', 'list[int]') to the location.
    loc = [p for p in loc if p not in ("int", "list[int]", "function-after[_check(), list[int]]")]
    field = ".".join(loc) if loc else None
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = "unknown key (not part of the format)"
    elif err["type"] == "missing":
        message = "required key is missing"
    if "input" in err and err["type"] not in ("missing", "extra_forbidden"):
        shown = repr(err["input"])
        if len(shown) <= 40 and "got" not in message:
            message += f" (got {shown})"
    return InputError(path, message, layer=layer, field=field)
