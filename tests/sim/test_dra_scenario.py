"""`gpucarve simulate` on a policy with DRA pools: the synthetic teams claim the DRA flavors
their quotas name (whole GPUs, MIG devices of one profile, a share of a GPU by its memory)
through `deviceClaims`, so those
pools carry work, as device-plugin pools do (under kube-default, which shares nothing, as
whole GPUs)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.policy_build import load_policy
from gpucarve.sim.traces.policy_scenario import scenario_for
from tests.paths import EXAMPLES

POLICY = EXAMPLES / "dra" / "policy.yaml"


def test_the_synthetic_teams_claim_the_dra_flavors_of_their_quotas() -> None:
    scenario = scenario_for(load_policy(POLICY, []).policy, 1.0)
    claims = {
        (c["deviceClassName"], tuple(c["selectors"]), tuple(c.get("capacity", {}).items()))
        for team in scenario.teams
        for kind in team.kinds
        for c in kind.pod_set.get("deviceClaims", [])
    }
    profile = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
    assert claims == {
        ("gpu.nvidia.com", (), ()),
        ("mig.nvidia.com", (profile,), ()),
        ("gpu.nvidia.com", (), (("memory", "11343Mi"),)),  # one of an L40S's 4 replicas
    }


def test_dra_pools_carry_work_in_a_simulation(tmp_path: Path) -> None:
    args = ["simulate", "--policy", str(POLICY), "--days", "1", "--json", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    # kube-default shares nothing: its claims take any whole DRA GPU, first fit
    pools = {"kube-default": ("h100",)}
    for scheduler, res in results.items():
        for pool in pools.get(scheduler, ("h100", "a100-mig", "l40s")):
            assert res["pools"][pool]["allocation"] > 0, (scheduler, pool, res["pools"][pool])
