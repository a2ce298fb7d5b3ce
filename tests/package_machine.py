"""A small package for fast tests: 2 chiplets of 8 Manticore clusters (two L1 quadrants).

Built from the preset's YAML (so its description, which schedule files carry, describes it
too): the L1 quadrant level and a chiplet root of two L1 quadrants.
"""

from __future__ import annotations

import copy
import functools
import tempfile
from importlib import resources
from pathlib import Path

import yaml

from autotune import Machine
from autotune.io.machine_yaml import with_base


@functools.cache
def small_package(chiplets: int = 2) -> Machine:
    text = (resources.files("autotune") / "machines" / "manticore-package.yaml").read_text()
    doc = with_base(yaml.safe_load(text), "manticore-package")  # the chiplet's tree too
    doc["name"] = f"test-package-{chiplets}"
    doc["parameters"]["chiplets"]["value"] = chiplets
    root = copy.deepcopy(doc["hierarchy"][-1])
    root["fanout"]["value"] = 2
    doc["hierarchy"] = [doc["hierarchy"][0], root]
    folder = Path(tempfile.mkdtemp(prefix="autotune-test-"))
    path = folder / f"test-package-{chiplets}.yaml"
    path.write_text(yaml.safe_dump(doc))
    machine = Machine.from_file(path)
    assert machine.chiplets == chiplets and machine.clusters == 8
    return machine
