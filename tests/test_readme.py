"""The README's Python snippets run as written (in order, sharing one namespace, as a reader
pasting them into one session would), in a scratch folder that sees the repository's
``examples/``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text("utf-8"), re.S)


def test_readme_has_python_snippets():
    assert len(SNIPPETS) >= 3


def test_readme_snippets_run(tmp_path, monkeypatch):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for number, code in enumerate(SNIPPETS, 1):
        try:
            exec(compile(code, f"README.md python snippet {number}", "exec"), namespace)
        except Exception as exc:  # name the snippet, keep the traceback
            pytest.fail(f"README python snippet {number} raised {type(exc).__name__}: {exc}")
