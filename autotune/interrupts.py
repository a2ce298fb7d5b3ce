"""Ctrl-C that is never lost, and storage writes it never cuts in half.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be when SIGINT
arrives. Where that is a finaliser or a weak-reference callback (SQLAlchemy runs some while
the garbage collector frees a session), the interpreter prints "Exception ignored in ..."
and carries on: the run would finish as if Ctrl-C had never been pressed. While
:func:`latched` is in force (the command line holds it for the whole run), the handler also
remembers the interrupt, and :func:`check` (called between trials and between a run's
steps) raises it again; the interpreter's "Exception ignored" report of that swallowed
interrupt is dropped (it is not lost, so the report would only be noise on stderr).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_pending = threading.Event()


def _remember(signum: int, frame: FrameType | None) -> None:
    """SIGINT handler: remember the interrupt, then raise it as Python's own handler does."""
    _pending.set()
    signal.default_int_handler(signum, frame)


def _quiet_if_remembered(unraisable: sys.UnraisableHookArgs) -> None:
    """``sys.unraisablehook`` under :func:`latched`: an interrupt swallowed in a finaliser
    is remembered (:func:`check` raises it again), so its report is left out; any other
    unraisable error is reported as before."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _pending.is_set():
        return
    sys.__unraisablehook__(unraisable)


def _ours(handler: object) -> bool:
    return handler is signal.default_int_handler or handler is _remember


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def latched() -> Iterator[None]:
    """Remember every Ctrl-C during the block, so that :func:`check` raises one that was
    swallowed. Only in the main thread, and only over Python's own handler (a caller's own
    handler is left alone)."""
    if not _in_main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _pending.clear()
    previous_hook = sys.unraisablehook
    signal.signal(signal.SIGINT, _remember)
    sys.unraisablehook = _quiet_if_remembered
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = previous_hook


def check() -> None:
    """Raise ``KeyboardInterrupt`` if Ctrl-C was pressed and not yet acted on (it was
    swallowed where it landed)."""
    if _pending.is_set():
        _pending.clear()
        raise KeyboardInterrupt


@contextmanager
def deferred() -> Iterator[None]:
    """Hold Ctrl-C back until the block ends (then raise ``KeyboardInterrupt``), so that a
    storage write is never cut in half. Only in the main thread with Python's own handler
    (or :func:`latched`'s)."""
    previous = signal.getsignal(signal.SIGINT)
    if not _in_main_thread() or not _ours(previous):
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            _pending.clear()
            raise KeyboardInterrupt
    check()
