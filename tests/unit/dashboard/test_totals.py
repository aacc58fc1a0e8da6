"""Every GPU of a pool is in one state the dashboard names, with a legend entry and a column:
a GPU held outside the policy, and the part of a MIG GPU its layout leaves in no instance,
count too, so each pool's row adds up to its GPUs (from the cluster, not the page's model)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import build_policy
from gpucarve.core.cluster import Allocation, build_cluster
from gpucarve.core.snapshot import Snapshot
from gpucarve.dashboard import model
from gpucarve.dashboard.model import Frame
from gpucarve.dashboard.server import Board
from gpucarve.engine import run_cycle
from tests.browser import chromium, show
from tests.unit.dashboard.serving import serving

OUTSIDE = "training-1/gpu0"


def frame() -> Frame:
    doc = yaml.safe_load(example_path(POLICY).read_text())
    production = next(p for p in doc["pools"] if p["name"] == "production")
    production["mig"]["layout"] = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}  # 7 of 8 slices
    data_science = next(q for q in doc["queues"] if q["name"] == "data-science")
    data_science["quota"]["a100-mig-1g.10gb"]["nominal"] = 0  # 16 1g.10gb instances now
    policy = build_policy(doc, packaged_catalog()).policy
    cluster = build_cluster(policy)
    gpu = next(g for g in cluster.node("training-1").gpus if g.id == OUTSIDE)
    held = {
        sid: Allocation(sid, "pod:other/not-governed", s.compute_milli, s.memory_mib)
        for sid in gpu.slice_ids
        for s in [cluster.slices[sid]]
    }
    s = Snapshot(policy, cluster.with_allocations(held), (), ())
    return Frame(s, run_cycle(s, 0))


def test_each_pools_states_add_up_to_its_gpus() -> None:
    pools = {p["name"]: p for p in model.cluster(frame())["pools"]}
    for p in pools.values():
        assert sum(p["states"].values()) == pytest.approx(p["gpus"]), p
    assert pools["training"]["states"]["other"] == 1
    assert pools["production"]["states"]["stranded"] == pytest.approx(16 / 8)
    node = model.node(frame(), model.EVERYONE, "production-0")
    assert node is not None and node["gpus"][0]["stranded"] == 0.125


@pytest.fixture
def base() -> Iterator[str]:
    board = Board()
    board.show(frame(), "2026-12-03T09:00:00+00:00")
    with serving(board) as url:
        yield url


def test_the_cluster_page_has_a_column_and_a_legend_for_every_state(base: str) -> None:
    with chromium() as d:
        show(d, base, "cluster")
        head = [th.text for th in d.find_elements("css selector", "thead th")]
        states = head[6:-1]  # past GPUs and in use, before the bar
        assert states == ["Reserved for a waiting gang (GPUs)", "Out of service (GPUs)",
                          "MIG change in flight (GPUs)", "Held outside the policy (GPUs)",
                          "In no MIG instance of the layout (GPUs)", "Free (GPUs)"]  # fmt: skip
        legend = d.find_element("css selector", ".legend").text
        for name in ("held outside the policy", "in no MIG instance of the layout"):
            assert name in legend
        for tr in d.find_elements("css selector", "tbody tr"):
            cells = [td.text for td in tr.find_elements("css selector", "td")]
            gpus, counted = float(cells[4]), [float(c) for c in cells[5:-1]]
            assert sum(counted) == pytest.approx(gpus, abs=0.01), cells
        show(d, base, "node/production-0")
        ends = d.find_elements("css selector", '[data-state="stranded"]')
        assert len(ends) == 2 and "0.125 of the GPU" in ends[0].get_attribute("aria-label")
