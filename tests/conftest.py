from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from autotune import Machine

# Deterministic property tests: the same examples on every machine and every run (CI
# included), so a red test is a reproducible finding, never a lucky draw.
settings.register_profile("autotune", derandomize=True)
settings.load_profile("autotune")


ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NETWORKS = ("resnet50", "vgg16", "yolov3", "mobilenetv2", "alexnet")


@pytest.fixture(scope="session")
def manticore() -> Machine:
    return Machine.preset("manticore")
