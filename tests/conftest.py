from __future__ import annotations

from pathlib import Path

import pytest

from autotune import Machine

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NETWORKS = ("resnet50", "vgg16", "yolov3", "mobilenetv2", "alexnet")


@pytest.fixture(scope="session")
def manticore() -> Machine:
    return Machine.preset("manticore")
