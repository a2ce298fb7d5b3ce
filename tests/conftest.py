from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

from autotune import Machine

# Deterministic property tests: the same examples on every machine and every run (CI
# included), so a red test is a reproducible finding, never a lucky draw.
settings.register_profile("autotune", derandomize=True)
settings.load_profile("autotune")


ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NETWORKS = ("resnet50", "vgg16", "yolov3", "mobilenetv2", "googlenet", "alexnet", "mobilenetv3")


def load_script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (``benchmarks/`` is not a package), registered in
    ``sys.modules`` (dataclasses look their module up while building)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def manticore() -> Machine:
    return Machine.preset("manticore")


# -- batch sweeps (autotune.batching) ------------------------------------------------------
#: One conv and two fc layers, quick to tune: fc1 (1024 -> 1024) is memory-bound at batch 1
#: and compute-bound from batch 32 on manticore; fc2 (1024 -> 10) stays memory-bound.
TINY_FC_YAML = """network: tiny
layers:
  - {name: c1, kind: conv, in: [16, 16, 8], out_channels: 16, kernel: 3, padding: 1}
  - {name: fc1, kind: fc, in: [1, 1, 1024], out_channels: 1024}
  - {name: fc2, kind: fc, in: [1, 1, 1024], out_channels: 10}
"""
TINY_FC_BATCHES = (1, 4, 16, 32, 64)
#: The sweeps' tests are about batching, not the search: exhaustive enumeration finds the
#: integer program's optimum (``tests/search/test_ilp.py``) some 6x sooner on these layers.
TINY_FC_SEARCH = "exhaustive"


@pytest.fixture(scope="session")
def tiny_fc_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nets") / "tiny.yaml"
    path.write_text(TINY_FC_YAML)
    return path


@pytest.fixture(scope="session")
def tiny_fc_sweep(tiny_fc_file):
    from autotune import sweep

    return sweep(tiny_fc_file, batches=TINY_FC_BATCHES, search=TINY_FC_SEARCH)


# -- network plans (autotune.plans) --------------------------------------------------------
@pytest.fixture(scope="session")
def planned_result(manticore):
    """The residual-and-concat graph of ``tests.graphs.test_execute_plan`` tuned with its
    network plan (activations and weights in L2), without refinement or verification: a
    second to make, for the tests that show what a plan does."""
    import yaml

    from autotune import TuneOptions
    from autotune.api import tune_network
    from autotune.io.network_yaml import parse_network
    from tests.graphs.test_execute_plan import RESIDUAL_CONCAT

    net = parse_network(yaml.safe_load(RESIDUAL_CONCAT), "<test>")
    options = TuneOptions(refine=False, verify=False, processes=1, storage="memory")
    return tune_network(net, manticore, options, lambda stage, name: None)
