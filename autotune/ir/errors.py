"""Errors that keep the arguments they were raised with.

autotune's errors build one message for the terminal from several fields (a layer, a field,
a reason) and pass only that message to ``Exception``. Python pickles an exception as its
class and ``args``, so such an error raised in a worker process (a parallel solve,
refinement over processes) could not be rebuilt in the parent: the whole process pool broke
and the user saw ``BrokenProcessPool`` instead of the line naming the layer. Deriving from
``ArgumentsError`` makes an error pickle with the arguments it was constructed with.
"""

from __future__ import annotations

from functools import partial
from typing import Any


class ArgumentsError(Exception):
    """An exception rebuilt, when unpickled, from its constructor's own arguments."""

    _arguments: tuple[tuple[Any, ...], dict[str, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> ArgumentsError:
        error = super().__new__(cls, *args)
        error._arguments = (args, kwargs)
        return error

    def __reduce__(self) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
        args, kwargs = self._arguments
        return (partial(type(self), **kwargs) if kwargs else type(self)), args, vars(self)
