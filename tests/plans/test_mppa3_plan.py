"""The network plan on MPPA3: fp16, multicast mappings, and an L2 made of the clusters' shares
of local memory (the preset's ``l2_size``; seed 003: KaNN keeps activations there)."""

from __future__ import annotations

import yaml

from autotune import Machine, TuneOptions
from autotune.api import audit_schedule, tune_network
from autotune.io.network_yaml import parse_network
from autotune.ir.plan import check_plan
from tests.graphs.test_execute_plan import RESIDUAL_CONCAT


def quiet(stage: str, name: str) -> None:
    pass


def test_mppa3_keeps_activations_in_its_clusters_local_memories(tmp_path) -> None:
    mppa3 = Machine.preset("mppa3")
    assert mppa3.has_l2 and mppa3.dma_multicast
    assert mppa3.l1_bytes + mppa3.l2_bytes // mppa3.clusters == 4 * 2**20  # 4 MB each
    net = parse_network(yaml.safe_load(RESIDUAL_CONCAT), "<test>")
    options = TuneOptions(refine=False, processes=1, storage="memory", precision="fp16")
    result = tune_network(net, mppa3, options, quiet)
    plan = result.plan
    assert plan is not None and plan.status == "OPTIMAL" and check_plan(plan) == []
    assert any(t.level == "l2" for t in plan.tensors)
    assert any(r.placement.uses_l2 for r in result.layers)
    # a multicast mapping with streams in the L2 (conv1's filters, read once for its wave)
    assert any(r.mapping.multicast and r.placement.uses_l2 for r in result.layers)
    assert result.network_verified is not None and result.network_verified.ok
    assert all(r.verified is None or r.verified.ok for r in result.layers)
    path = tmp_path / "mppa3.json"
    result.save(path)
    assert audit_schedule(path).ok
