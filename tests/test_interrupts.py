"""Ctrl-C is never lost: one swallowed where it landed (a finaliser, a garbage-collector
callback) is raised again at the next check, and one during a storage write waits for it."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator

import pytest
import typer

from autotune import interrupts
from autotune.cli.app import refusing


class _Finalised:
    """Ctrl-C lands while the garbage collector runs this finaliser: the interpreter prints
    "Exception ignored in ..." and goes on (as in a SQLAlchemy weak-reference callback)."""

    def __del__(self) -> None:
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        handler(signal.SIGINT, None)


def _swallow_an_interrupt() -> None:
    _Finalised()
    gc.collect()


@pytest.fixture(autouse=True)
def _python_handler(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Python's own SIGINT handler, as in a command-line run (a pytest-xdist worker has its
    own), and no "Exception ignored" report of the swallowed interrupt."""
    monkeypatch.setattr("sys.unraisablehook", lambda unraisable: None)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_swallowed_interrupt_is_raised_at_the_next_check() -> None:
    with interrupts.latched():
        _swallow_an_interrupt()  # nothing raised here
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
        interrupts.check()  # acted on once
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_the_latch_nothing_is_remembered() -> None:
    _swallow_an_interrupt()
    interrupts.check()


def test_the_command_line_ends_a_run_whose_interrupt_was_swallowed() -> None:
    with pytest.raises(typer.Exit) as stopped, interrupts.latched(), refusing():
        _swallow_an_interrupt()
    assert stopped.value.exit_code == 130


def test_an_interrupt_during_a_storage_write_waits_for_it_to_end() -> None:
    written = []
    with interrupts.latched(), pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            written.append("whole")
    assert written == ["whole"]
    interrupts.check()  # raised once, not again


def test_the_latch_drops_the_report_of_a_swallowed_interrupt_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The interrupt is remembered, so the interpreter's "Exception ignored" report of it is
    noise on stderr (a CI run saw it above the one line 'interrupted'); any other error a
    finaliser swallows is still reported."""
    reported: list[BaseException | None] = []
    monkeypatch.setattr("sys.__unraisablehook__", lambda u: reported.append(u.exc_value))
    with interrupts.latched():
        _swallow_an_interrupt()
        assert reported == []

        class _Broken:
            def __del__(self) -> None:
                raise ValueError("finaliser")

        _Broken()
        gc.collect()
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert [type(e) for e in reported] == [ValueError]
