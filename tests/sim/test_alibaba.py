"""The Alibaba trace importer: shapes become pools, pods become workloads as documented, bad
rows are refused with their line or skipped and counted, and the result replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.catalog_file import load_catalog
from gpucarve.core.problems import InvalidInput
from gpucarve.sim.traces.alibaba import import_trace
from tests.paths import trace as public_trace

NODES = (
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n1,96000,393216,8,V100M32\n"
    "n2,96000,393216,8,V100M32\n"
    "n3,16000,122880,2,P100\n"
    "cpu1,64000,262144,0,\n"
)
PODS_HEAD = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)
PODS = PODS_HEAD + (
    "share,4000,8192,1,300,,BE,Running,1000,5000,1010\n"
    "whole4,32000,65536,4,1000,V100M32,LS,Succeeded,1500,9500,1600\n"
    "cpuonly,2000,4096,0,0,,Burstable,Running,2000,3000,2000\n"
    "waiting,1000,1024,1,500,P100|V100M32,LS,Pending,2500,2600,\n"
)


def files(tmp_path: Path, nodes: str = NODES, pods: str = PODS) -> tuple[Path, Path]:
    n, p = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    n.write_text(nodes)
    p.write_text(pods)
    return n, p


def test_pools_per_node_shape_and_quota_per_flavor(tmp_path: Path) -> None:
    imported = import_trace(*files(tmp_path), load_catalog())
    pools = {p["name"]: p for p in imported.policy["pools"]}
    assert set(pools) == {"v100m32-8g-96c-384gi", "p100-2g-16c-120gi"}  # CPU-only node dropped
    v100 = pools["v100m32-8g-96c-384gi"]
    assert (v100["gpuModel"], v100["nodes"], v100["gpusPerNode"], v100["cpusPerNode"]) == (
        "V100-32GB",
        2,
        8,
        96,
    )
    assert v100["sharing"] == "time-slicing" and v100["replicas"] == 10
    quota = imported.policy["queues"][0]["quota"]
    assert quota == {"ali-p100-shared": {"nominal": 20}, "ali-v100m32-shared": {"nominal": 160}}
    assert imported.catalog is not None
    assert [m["id"] for m in imported.catalog["models"]] == ["P100-16GB"]


def test_pods_map_to_workloads_as_documented(tmp_path: Path) -> None:
    imported = import_trace(*files(tmp_path), load_catalog())
    docs = {d["name"]: d for d in imported.workloads}
    share = docs["share"]
    assert share["submitTime"] == 0 and share["duration"] == 5000 - 1010
    assert share["priorityClass"] == "best-effort"
    assert share["podSets"][0]["annotations"] == {"gpucarve.io/gpu-fraction": "300"}
    whole = docs["whole4"]
    assert whole["topology"] == "node" and whole["priorityClass"] == "latency-sensitive"
    ps = whole["podSets"][0]
    assert ps["count"] == 4
    assert ps["resources"]["requests"] == {"cpu": "8000m", "memory": "16384Mi"}
    assert ps["affinity"] == [
        {"key": "alibaba.com/gpu-model", "operator": "In", "values": ["V100M32"]}
    ]
    assert "annotations" not in docs["cpuonly"]["podSets"][0]
    assert docs["cpuonly"]["priorityClass"] == "burstable"
    # never scheduled in the trace: it lasted from creation to deletion
    assert docs["waiting"]["duration"] == 100


def test_model_map_replaces_the_catalog_extension(tmp_path: Path) -> None:
    imported = import_trace(*files(tmp_path), load_catalog(), model_map={"P100": "T4"})
    assert imported.catalog is None
    assert {p["gpuModel"] for p in imported.policy["pools"]} == {"V100-32GB", "T4"}


def test_unknown_model_names_the_fix(tmp_path: Path) -> None:
    nodes = NODES.replace("P100", "Z9")
    with pytest.raises(InvalidInput) as err:
        import_trace(*files(tmp_path, nodes=nodes), load_catalog())
    assert "--model-map Z9=" in err.value.problems[0].fix


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("bad,1000,10,1,1500,,BE,Running,1,2,1\n", "not a valid request"),
        ("bad,x,10,1,500,,BE,Running,1,2,1\n", "not a whole number"),
        ("bad,1000,10,1,500,,BE,Running,10,5,8\n", "deleted before it started"),
        ("share,1000,10,1,500,,BE,Running,1,2,1\n", "repeated"),
    ],
)
def test_bad_pod_rows_name_their_line_or_are_skipped(tmp_path: Path, row: str, needle: str) -> None:
    nodes, pods = files(tmp_path, pods=PODS + row)
    with pytest.raises(InvalidInput) as err:
        import_trace(nodes, pods, load_catalog())
    problem = err.value.problems[0]
    assert problem.line == 6 and needle in problem.message
    lenient = import_trace(nodes, pods, load_catalog(), lenient=True)
    assert lenient.skipped_pods == 1 and len(lenient.workloads) == 4


def test_cli_writes_files_that_validate_and_replay(tmp_path: Path) -> None:
    nodes, pods = files(tmp_path)
    out = tmp_path / "out"
    runner = CliRunner()
    r = runner.invoke(
        app, ["import", "alibaba", "--nodes", str(nodes), "--pods", str(pods), "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert (out / "policy.yaml").exists() and (out / "catalog.yaml").exists()
    lines = (out / "workloads.jsonl").read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["name"] == "share"
    args = ["--policy", str(out / "policy.yaml"), "--catalog", str(out / "catalog.yaml")]
    r = runner.invoke(app, ["validate", str(out / "policy.yaml"), *args[2:]])
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        ["simulate", *args, "--trace", str(out / "workloads.jsonl"), "--json", "--out", str(out)],
    )
    assert r.exit_code == 0, r.output
    results = json.loads((out / "results.json").read_text())["results"]
    for name in ("kube-default", "static-quota", "gpucarve"):
        assert results[name]["completed"] == 4, name


def test_cli_rejects_a_bad_model_map(tmp_path: Path) -> None:
    nodes, pods = files(tmp_path)
    r = CliRunner().invoke(
        app,
        ["import", "alibaba", "--nodes", str(nodes), "--pods", str(pods), "--model-map", "P100"],
    )
    assert r.exit_code == 2 and "CODE=MODEL" in r.output


def test_the_shared_trace_imports_whole() -> None:
    trace = public_trace("alibaba-gpu-v2023")
    imported = import_trace(
        trace / "openb_node_list_all_node.csv",
        trace / "openb_pod_list_gpushare40.csv",
        load_catalog(),
    )
    pools = imported.policy["pools"]
    assert sum(p["nodes"] for p in pools) == 1213
    assert sum(p["nodes"] * p["gpusPerNode"] for p in pools) == 6212
    assert len(imported.workloads) == 8152 and imported.skipped_pods == 0
