"""Hostile and broken input, one class per test, through the commands a user runs: each ends
in exit 2 with the problem's code, a line where there is one and a fix, never a traceback,
a hang or unbounded memory. (Each case here crashed, hung or was accepted before.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from tests.paths import BUILTIN

POLICY = (BUILTIN / "three-teams.yaml").read_text()
CSV_HEAD = (
    "name,namespace,queue,priority_class,submit_time,duration,pods,min_pods,gpus,mig_profile,"
    "shared,gpu_fraction,gpu_memory,cpu,memory,topology,utilisation\n"
)
NODES_HEAD = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS_HEAD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
GPU_JOB = {"count": 1, "resources": {"limits": {"nvidia.com/gpu": 1}}}


def invoke(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    return r.exit_code, " ".join(r.stderr.split())


def alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def fill(tmp: Path, nodes: str, pods: str) -> list[str]:
    """`bench fill` over a node list and a pod list given as rows."""
    n, p = write(tmp, "n.csv", NODES_HEAD + nodes), write(tmp, "p.csv", PODS_HEAD + pods)
    return ["bench", "fill", "--seeds", "1", "--nodes", n, "--pods", p]


def write(tmp: Path, name: str, text: str | bytes) -> str:
    p = tmp / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return str(p)


def expect(tmp: Path, case: Callable[[Path], list[str]], code: str, line: int | None) -> None:
    rc, err = invoke(*case(tmp))
    assert rc == 2, err
    assert f"[{code}]" in err, err
    assert "fix:" in err, err
    if line is not None:
        assert f"line {line}" in err, err


YAML_CASES: dict[str, tuple[Callable[[Path], list[str]], str, int | None]] = {
    "alias bomb, validate": (
        lambda t: ["validate", write(t, "p.yaml", alias_bomb())],
        "yaml-alias-expansion",
        None,
    ),
    "alias bomb, catalog": (
        lambda t: ["catalog", "list", "--catalog", write(t, "c.yaml", alias_bomb())],
        "yaml-alias-expansion",
        None,
    ),
    "alias bomb, plan workloads": (
        lambda t: ["plan", str(BUILTIN / "three-teams.yaml"), write(t, "w.yaml", alias_bomb())],
        "yaml-alias-expansion",
        None,
    ),
    "self-referencing anchor": (
        lambda t: ["validate", write(t, "p.yaml", "kind: Policy\nmetadata: &m {self: *m}\n")],
        "yaml-alias-cycle",
        2,
    ),
    "nested 3,000 deep": (
        lambda t: ["validate", write(t, "p.yaml", "a: " + "[" * 3000 + "]" * 3000 + "\n")],
        "yaml-too-deep",
        1,
    ),
    "nested maps, mig import": (
        lambda t: ["mig", "import", write(t, "m.yaml", "a: " + "{b: " * 2000 + "1" + "}" * 2000)],
        "yaml-too-deep",
        1,
    ),
    "control character": (
        lambda t: ["validate", write(t, "p.yaml", "kind: Policy\nx: \x08\n")],
        "yaml-syntax",
        2,
    ),
}


@pytest.mark.parametrize("name", sorted(YAML_CASES))
def test_yaml_aliases_depth_and_characters(tmp_path: Path, name: str) -> None:
    expect(tmp_path, *YAML_CASES[name])


SIZE_CASES: dict[str, tuple[Callable[[Path], list[str]], str, int | None]] = {
    "a billion replicas": (
        lambda t: [
            "cluster",
            "summary",
            write(t, "p.yaml", POLICY.replace("replicas: 8", "replicas: 1000000000")),
        ],
        "out-of-range",
        None,
    ),
    "100,000 nodes in a pool": (
        lambda t: [
            "simulate",
            "--policy",
            write(t, "p.yaml", POLICY.replace("nodes: 6", "nodes: 100000", 1)),
        ],
        "out-of-range",
        None,
    ),
    "a catalog geometry of 16 slices": (
        lambda t: ["mig", "layouts", "BIG", "--catalog", write(t, "c.yaml", BIG_CATALOG)],
        "out-of-range",
        None,
    ),
}
BIG_CATALOG = """apiVersion: gpucarve.io/v1alpha1
kind: GpuCatalog
models:
- id: BIG
  flavorPrefix: big
  architecture: x
  computeCapability: "9.0"
  memoryGB: 80
  memoryMiB: 81920
  smCount: 132
  mig:
    memorySlices: 16
    computeSlices: 16
    profiles:
    - {name: 1g.1gb, computeSlices: 1, memorySlices: 1, memoryMiB: 1000, maxInstances: 8,
       starts: [0]}
"""


@pytest.mark.parametrize("name", sorted(SIZE_CASES))
def test_unbounded_sizes_are_refused_at_validation(tmp_path: Path, name: str) -> None:
    expect(tmp_path, *SIZE_CASES[name])


def test_a_whole_cluster_beyond_the_largest_that_exist_is_refused(tmp_path: Path) -> None:
    big = POLICY.replace("nodes: 4\n    gpusPerNode: 8", "nodes: 25000\n    gpusPerNode: 16", 1)
    assert big != POLICY
    expect(tmp_path, lambda t: ["validate", write(t, "p.yaml", big)], "cluster-too-large", None)


def test_seeds_are_bounded(tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", NODES_HEAD + "a,8000,1000,2,T4\n")
    pods = write(tmp_path, "p.csv", PODS_HEAD + "p,100,100,1,1000,\n")
    rc, err = invoke("bench", "fill", "--nodes", nodes, "--pods", pods, "--seeds", "1-100000000")
    assert rc == 2 and "more than 1,000 seeds" in err


NUMBER_CASES: dict[str, tuple[Callable[[Path], list[str]], str, int | None]] = {
    "superscript in a fraction annotation": (
        lambda t: [
            "plan",
            str(BUILTIN / "three-teams.yaml"),
            write(
                t,
                "w.yaml",
                "workloads:\n- {name: a, namespace: research, podSets: "
                '[{annotations: {gpucarve.io/gpu-fraction: "²"}}]}\n',
            ),
        ],
        "bad-fraction",
        2,
    ),
    "superscript in a node list": (
        lambda t: fill(t, "a,6400²,1000,2,T4\n", "p,100,100,1,1000,\n"),
        "bad-row",
        2,
    ),
    "fullwidth digits in a trace": (
        lambda t: [
            "simulate",
            "--trace",
            write(t, "t.csv", CSV_HEAD + "a,research,,,0,100,1,,１,,,,,,,,\n"),
        ],
        "bad-row",
        2,
    ),
    "NaN weight": (
        lambda t: ["validate", write(t, "p.yaml", POLICY.replace("weight: 1", "weight: .nan", 1))],
        "not-finite",
        None,
    ),
    "NaN utilisation in JSONL": (
        lambda t: [
            "simulate",
            "--trace",
            write(
                t,
                "t.jsonl",
                '{"name":"a","namespace":"research","duration":9,"utilisation":NaN,"podSets":[]}\n',
            ),
        ],
        "bad-row",
        1,
    ),
    "CPU of 10^21": (
        lambda t: [
            "plan",
            str(BUILTIN / "three-teams.yaml"),
            write(
                t,
                "w.yaml",
                "workloads:\n- {name: a, namespace: research, podSets: "
                '[{resources: {requests: {cpu: "1000000000000000000000"}}}]}\n',
            ),
        ],
        "bad-quantity",
        2,
    ),
    "a 5,000-digit number in JSONL": (
        lambda t: [
            "simulate",
            "--trace",
            write(t, "t.jsonl", '{"name":"a","duration":1' + "0" * 5000 + "}\n"),
        ],
        "bad-row",
        1,
    ),
}


@pytest.mark.parametrize("name", sorted(NUMBER_CASES))
def test_numbers(tmp_path: Path, name: str) -> None:
    expect(tmp_path, *NUMBER_CASES[name])


FILE_CASES: dict[str, tuple[Callable[[Path], list[str]], str, int | None]] = {
    "a folder as a policy": (lambda t: ["validate", str(t)], "not-a-file", None),
    "latin-1 bytes": (
        lambda t: ["validate", write(t, "p.yaml", POLICY.encode() + b"# caf\xe9\n")],
        "not-utf8",
        POLICY.count("\n") + 1,
    ),
    "NUL byte, located by line": (
        lambda t: [
            "validate",
            write(t, "p.yaml", POLICY.replace("kind: Policy", "kind: Pol\x00icy")),
        ],
        "nul-byte",
        14,
    ),
    "a CSV cell over 131,072 characters": (
        lambda t: [
            "simulate",
            "--trace",
            write(t, "t.csv", CSV_HEAD + "a" * 200_000 + ",research,,,0,9,1,,1,,,,,,,,\n"),
        ],
        "bad-csv",
        2,
    ),
    "deeply nested JSONL": (
        lambda t: [
            "simulate",
            "--trace",
            write(t, "t.jsonl", "[" * 100_000 + "]" * 100_000 + "\n"),
        ],
        "bad-row",
        1,
    ),
    "header-only node list": (
        lambda t: fill(t, "", "p,100,100,1,1000,\n"),
        "nothing-to-fill",
        None,
    ),
    "a pod list with no GPU pod": (
        lambda t: fill(t, "a,8000,1000,2,T4\n", "p,100,100,0,0,\n"),
        "nothing-to-fill",
        None,
    ),
    "a truncated trace row": (
        lambda t: ["simulate", "--trace", write(t, "t.csv", CSV_HEAD + "a,research,,,0,100\n")],
        "bad-row-shape",
        2,
    ),
    "a trace row with extra cells": (
        lambda t: [
            "simulate",
            "--trace",
            write(t, "t.csv", CSV_HEAD + "a,research,,,0,100,1,,1,,,,,,,,,x,y\n"),
        ],
        "bad-row-shape",
        2,
    ),
    "utilisation abc": (
        lambda t: [
            "simulate",
            "--trace",
            write(
                t,
                "t.jsonl",
                json.dumps(
                    {
                        "name": "a",
                        "namespace": "research",
                        "duration": 9,
                        "utilisation": "abc",
                        "podSets": [GPU_JOB],
                    }
                )
                + "\n",
            ),
        ],
        "bad-row",
        1,
    ),
}


@pytest.mark.parametrize("name", sorted(FILE_CASES))
def test_files(tmp_path: Path, name: str) -> None:
    expect(tmp_path, *FILE_CASES[name])


def test_a_bom_is_dropped_not_read_as_part_of_the_first_column(tmp_path: Path) -> None:
    row = "a,research,,,0,100,1,,1,,,,,,,,\n"
    rc, err = invoke(
        "simulate",
        "--trace",
        write(tmp_path, "t.csv", "\ufeff" + CSV_HEAD + row),
        "--out",
        str(tmp_path / "o"),
        "--compare",
        "gpucarve",
    )
    assert rc == 0, err


@pytest.mark.parametrize("kind", ["file", "unwritable"])
def test_out_is_checked_before_the_run(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "taken"
    if kind == "file":
        target.write_text("")
    else:
        target = Path("/proc/no-such/out")
    rc, err = invoke("simulate", "--days", "30", "--out", str(target))
    assert rc == 2 and f"--out {target}" in err and "fix:" in err
    assert not (tmp_path / "results.json").exists()


MIGPARTED = (
    "version: v1\nmig-configs:\n  {name}:\n  - devices: all\n    mig-enabled: true\n"
    "{filter}    mig-devices: {{1g.10gb: 7}}\n"
)


def test_mig_parted_hex_filters_and_integer_names_are_read(tmp_path: Path) -> None:
    text = MIGPARTED.format(name="5", filter="    device-filter: 0x20B510DE\n")
    rc, err = invoke("mig", "import", write(tmp_path, "m.yaml", text))
    assert rc == 0, err  # 0x20B510DE is the A100-SXM4-80GB, an int to YAML


MIGPARTED_CASES: dict[str, tuple[Callable[[Path], list[str]], str, int | None]] = {
    "a configuration that is a number": (
        lambda t: ["mig", "import", write(t, "m.yaml", "version: v1\nmig-configs: {c: 5}\n")],
        "bad-config",
        None,
    ),
    "a duplicate configuration": (
        lambda t: [
            "mig",
            "import",
            write(t, "m.yaml", MIGPARTED.format(name="c", filter="") + "  c: []\n"),
        ],
        "duplicate-key",
        7,
    ),
    "a non-MIG model": (
        lambda t: [
            "mig",
            "import",
            "--model",
            "L40S",
            write(t, "m.yaml", MIGPARTED.format(name="c", filter="")),
        ],
        "no-mig",
        None,
    ),
    "a filter that is a map": (
        lambda t: [
            "mig",
            "import",
            write(t, "m.yaml", MIGPARTED.format(name="c", filter="    device-filter: {a: 1}\n")),
        ],
        "bad-device-filter",
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(MIGPARTED_CASES))
def test_mig_parted_import(tmp_path: Path, name: str) -> None:
    expect(tmp_path, *MIGPARTED_CASES[name])


def test_messages_name_the_field_and_line(tmp_path: Path) -> None:
    workload = (
        "- {name: a, namespace: research, podSets: [{resources: {limits: {nvidia.com/gpu: 1}}}]}\n"
    )
    wl = write(tmp_path, "w.yaml", "workloads:\n" + workload + workload)
    rc, err = invoke("plan", str(BUILTIN / "three-teams.yaml"), wl)
    assert rc == 2 and "workloads[1].name (line 3)" in err and "first as workloads[0]" in err
    bad_ns = POLICY.replace("namespaces: [research]", 'namespaces: ["UPPER", "a b"]', 1)
    assert bad_ns != POLICY
    rc, err = invoke("validate", write(tmp_path, "p.yaml", bad_ns))
    assert rc == 2 and "'UPPER' is not a DNS label" in err and "'a b' is not a DNS label" in err
    rc, err = invoke(
        "simulate",
        "--trace",
        write(tmp_path, "t.csv", CSV_HEAD + "a,research,,,0,9,1,,--5,,,,,,,,\n"),
    )
    assert rc == 2 and "invalid literal" not in err and "gpus is '--5'" in err


def test_lenient_with_every_row_bad_says_how_many_and_the_first_reason(tmp_path: Path) -> None:
    rows = "".join(f"a{i},research,,,0,9,1,,x{i},,,,,,,,\n" for i in range(3))
    rc, err = invoke("simulate", "--lenient", "--trace", write(tmp_path, "t.csv", CSV_HEAD + rows))
    assert rc == 2 and "all 3 rows were skipped" in err and "line 2: gpus is 'x0'" in err


def test_import_alibaba_refuses_a_node_no_server_has(tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", NODES_HEAD + "a,8000,4096,100,T4\n")
    pods = write(tmp_path, "p.csv", PODS_HEAD + "p,100,100,1,1000,\n")
    rc, err = invoke(
        "import", "alibaba", "--nodes", nodes, "--pods", pods, "--out", str(tmp_path / "o")
    )
    assert rc == 2 and "100 GPUs; no server holds more than 16" in err


def test_simulate_works_on_any_valid_policy(tmp_path: Path) -> None:
    """The three-team scenario needs the example's queues; another policy gets one made from
    its own queues (here: the policy `import alibaba` writes)."""
    nodes = write(tmp_path, "n.csv", NODES_HEAD + "a,32000,65536,2,T4\nb,32000,65536,2,T4\n")
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    head += "creation_time,deletion_time,scheduled_time\n"
    rows = "".join(
        f"p{i},1000,1024,1,1000,,LS,Running,{i * 60},{i * 60 + 3600},{i * 60}\n" for i in range(20)
    )
    pods = write(tmp_path, "p.csv", head + rows)
    out = tmp_path / "ali"
    rc, err = invoke("import", "alibaba", "--nodes", nodes, "--pods", pods, "--out", str(out))
    assert rc == 0, err
    rc, err = (
        invoke(
            "simulate",
            "--policy",
            str(out / "policy.yaml"),
            "--catalog",
            str(out / "catalog.yaml"),
            "--days",
            "0.5",
            "--out",
            str(tmp_path / "o"),
            "--json",
        )
        if (out / "catalog.yaml").exists()
        else invoke(
            "simulate",
            "--policy",
            str(out / "policy.yaml"),
            "--days",
            "0.5",
            "--out",
            str(tmp_path / "o"),
            "--json",
        )
    )
    assert rc == 0, err
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert doc["results"]["gpucarve"]["workloads"] > 0


def test_import_alibaba_refuses_a_pod_list_without_pods(tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", NODES_HEAD + "a,32000,65536,2,T4\n")
    pods = write(tmp_path, "p.csv", PODS_HEAD)
    rc, err = invoke("import", "alibaba", "--nodes", nodes, "--pods", pods, "--out", str(tmp_path))
    assert rc == 2 and "[no-pods]" in err and "nothing to replay" in err


MANY_PROFILES = (
    BIG_CATALOG.replace(
        "memorySlices: 16\n    computeSlices: 16", "memorySlices: 8\n    computeSlices: 8"
    ).split("    profiles:\n")[0]
    + "    profiles:\n"
    + "".join(
        f"    - {{name: 1g.{i}gb, computeSlices: 1, memorySlices: 1, memoryMiB: {i * 100}, "
        "maxInstances: 8, starts: [0, 1, 2, 3, 4, 5, 6, 7]}\n"
        for i in range(1, 17)
    )
)


def test_a_geometry_too_large_to_search_says_so(tmp_path: Path) -> None:
    """16 one-slice profiles with 8 starts each: 17^8 placements. Listing stops at the
    search budget; validation and checks still work, without examples."""
    cat = write(tmp_path, "c.yaml", MANY_PROFILES)
    rc, err = invoke("mig", "layouts", "BIG", "--catalog", cat)
    assert rc == 2 and "too many profiles and starts" in err and "fix:" in err
    rc, _ = invoke("mig", "check", "BIG", "9x1g.1gb", "--catalog", cat)
    assert rc == 1
    pool = (
        "apiVersion: gpucarve.io/v1alpha1\nkind: Policy\nmetadata: {name: t}\npools:\n"
        "- {name: p, gpuModel: BIG, nodes: 1, gpusPerNode: 1, sharing: mig, "
        "mig: {layout: {1g.1gb: 9}%s}}\n"
    )
    rc, err = invoke("validate", write(tmp_path, "p.yaml", pool % ""), "--catalog", cat)
    assert rc == 2 and "[mig-layout-invalid]" in err and "fit the GPU's memory" in err
    dynamic = pool.replace("1g.1gb: 9", "1g.1gb: 8") % ", dynamic: {}"
    rc, err = invoke("validate", write(tmp_path, "d.yaml", dynamic), "--catalog", cat)
    assert rc == 2 and "[mig-geometry-too-large]" in err


def _silent_server() -> tuple[Any, int]:
    """A TCP server on loopback that accepts connections and never answers."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock, sock.getsockname()[1]


def _kubeconfig(tmp: Path, port: int) -> str:
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }  # fmt: skip
    return write(tmp, "kubeconfig", json.dumps(doc))


@pytest.mark.parametrize(
    "args",
    [
        ["queues"],
        ["explain", "research/train-0", "--policy", str(BUILTIN / "three-teams.yaml")],
        ["apply", "--policy", str(BUILTIN / "three-teams.yaml")],
    ],
)
def test_an_api_server_that_never_answers_ends_the_command(tmp_path: Path, args: list[str]) -> None:
    sock, port = _silent_server()
    try:
        rc, err = invoke(*args, "--kubeconfig", _kubeconfig(tmp_path, port),
                         "--request-timeout", "2")  # fmt: skip
    finally:
        sock.close()
    assert rc == 2, err
    assert "in time" in err and "fix:" in err, err


def test_explain_refuses_a_name_kubernetes_would_not_have(tmp_path: Path) -> None:
    rc, err = invoke("explain", "research/trÄin-0", "--policy", str(BUILTIN / "three-teams.yaml"))
    assert rc == 2 and "no Kubernetes name" in err and "fix:" in err, err


def test_a_policy_may_not_govern_kubernetes_own_namespaces(tmp_path: Path) -> None:
    text = POLICY.replace("namespaces: [research]", "namespaces: [research, kube-system]")
    rc, err = invoke("validate", write(tmp_path, "p.yaml", text))
    assert rc == 2 and "[system-namespace]" in err and "fix:" in err, err


@pytest.mark.parametrize(
    "args",
    [
        ["render", "device-plugin", "--namespace", "Bad_NS"],
        ["render", "mig-config", "--config-map", "--name", "x" * 64],
        ["render", "monitoring", "--namespace", "-x"],
    ],
)
def test_render_names_are_kubernetes_names(args: list[str]) -> None:
    rc, err = invoke(*args, "--policy", str(BUILTIN / "three-teams.yaml"))
    err = " ".join(err.replace("│", " ").split())  # the usage box wraps the message
    assert rc == 2 and "no Kubernetes name" in err and "fix:" in err, err


def test_plan_refuses_a_clock_before_zero() -> None:
    rc, err = invoke("plan", "--now", "-1")
    assert rc == 2 and "--now" in err, err


def test_a_gpu_out_for_decades_is_refused_not_simulated(tmp_path: Path) -> None:
    failures = write(tmp_path, "f.csv", "time_s,node,gpu,repair_s\n0,training-0,0,1000000000\n")
    rc, err = invoke("simulate", "--days", "0.1", "--gpu-failures", failures,
                     "--out", str(tmp_path / "out"))  # fmt: skip
    assert rc == 2 and "repair_s" in err and "30 days" in err, err
