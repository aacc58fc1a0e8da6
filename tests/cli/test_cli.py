"""The commands as a user runs them: output, exit codes, and no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.core import mig
from tests.paths import BUILTIN, EXAMPLES
from tests.paths import trace as public_trace

runner = CliRunner()
THREE = str(BUILTIN / "three-teams.yaml")


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.stdout, r.stderr


def test_mig_check_three_3g_1g_on_h100_explains_memory_slices() -> None:
    code, out, _ = run("mig", "check", "H100-SXM5-80GB", "3g.40gb", "3g.40gb", "1g.10gb")
    assert code == 1
    assert "invalid" in out
    assert "needs 9 memory slices but the GPU has 8" in out
    assert "3g.40gb takes 4 memory slices (×2 = 8)" in out
    assert "closest valid layouts" in out and "2×3g.40gb" in out


def test_mig_check_valid_prints_placement() -> None:
    code, out, _ = run("mig", "check", "A100-80GB", "3g.40gb", "2x2g.20gb")
    assert code == 0
    assert "3g.40gb at start 4 (memory slices 4-7)" in out
    assert "2g.20gb at start 0 (memory slices 0-1)" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["mig", "check", "A100-80GB", "3g.20gb"], "no MIG profile '3g.20gb'"),
        (["mig", "check", "L40S", "1g.10gb"], "does not support MIG"),
        (["mig", "check", "H100", "1g.10gb"], "could mean"),
        (["mig", "layouts", "H10"], "unknown GPU model"),
        (["mig", "layouts", "T4"], "does not support MIG"),
        (["mig", "check", "A100-80GB", "0x3g.40gb"], "a count of 0"),
    ],
)
def test_mig_bad_arguments_exit_2(args: list[str], needle: str) -> None:
    code, _, err = run(*args)
    assert code == 2
    assert needle in err


def test_mig_layouts_count_equals_brute_force() -> None:
    from tests.unit.core.test_mig import _brute_force_layouts

    g = packaged_catalog().get("A100-80GB").mig
    assert g is not None
    code, out, _ = run("mig", "layouts", "A100-80GB", "--count")
    assert code == 0
    assert int(out.strip()) == len(_brute_force_layouts(g, media=False))
    code, out_media, _ = run("mig", "layouts", "A100-80GB", "--count", "--media")
    assert int(out_media.strip()) == len(_brute_force_layouts(g, media=True)) > int(out.strip())
    code, out_max, _ = run("mig", "layouts", "A100-80GB", "--count", "--maximal")
    assert int(out_max.strip()) == len(mig.maximal_layouts(g))


def test_mig_layouts_table() -> None:
    code, out, _ = run("mig", "layouts", "NVIDIA-A100-SXM4-80GB", "--maximal")
    assert code == 0
    assert "7g.80gb" in out and "3g.40gb@4" in out and "maximal MIG layouts" in out
    assert "+me" not in out


def test_validate_example_ok() -> None:
    code, out, _ = run("validate", THREE)
    assert code == 0
    flat = " ".join(out.split())
    assert "valid policy 'three-teams': 3 pools, 54 GPUs, 5 flavors, 3 queues" in flat


def test_validate_prints_a_cohort_tree() -> None:
    code, out, _ = run("validate", str(EXAMPLES / "departments" / "policy.yaml"))
    assert code == 0
    lines = [" ".join(line.split()) for line in out.splitlines()]
    i = lines.index(
        "cohort tree (what each cohort holds: its own quota and what its members lend it):"
    )
    tree = " ".join(lines[i + 1 :])
    assert "cohort company: a100-mig-1g.10gb holds 32;" in tree
    assert "h100-full holds 22, lends 22;" in tree  # ml: research's 16 and data science's 6
    assert tree.index("cohort ml") < tree.index("queues data-science, research")
    assert tree.endswith("queues production")
    code, out, _ = run("validate", THREE)
    assert "cohort tree" not in out  # flat cohorts: nothing to draw


def test_every_invalid_example_exits_2_naming_the_field() -> None:
    for path in sorted((EXAMPLES / "invalid").glob("*.yaml")):
        code, _, err = run("validate", str(path))
        assert code == 2, path
        assert "error:" in err and "fix:" in err, path
        assert "Traceback" not in err


@pytest.mark.parametrize("flags", [["--json"], ["--format", "json"]], ids=["json", "format"])
def test_validate_json_output(flags: list[str]) -> None:
    """--json, as every other command spells it; --format json still works, with a note."""
    code, out, err = run("validate", *flags, str(EXAMPLES / "invalid" / "case-study-layout.yaml"))
    assert code == 2
    doc = json.loads(out)
    (p,) = doc["problems"]
    assert (p["code"], p["path"], p["line"], p["severity"]) == (
        "mig-layout-invalid",
        "pools[0].mig.layout",
        16,
        "error",
    )
    assert ("deprecated; use --json" in err) == (flags[0] == "--format")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        (b"\xff\xfe\x00bad", "not UTF-8"),
        (b"", "empty"),
        (b"a: 1\n---\nb: 2\n", "2 YAML documents"),
        (b"- just\n- a list\n", "expected a mapping"),
    ],
)
def test_validate_bad_files(tmp_path: Path, content: bytes | None, needle: str) -> None:
    f = tmp_path / "p.yaml"
    if content is not None:
        f.write_bytes(content)
    code, _, err = run("validate", str(f))
    assert code == 2
    assert needle in err


def test_validate_directory(tmp_path: Path) -> None:
    code, _, err = run("validate", str(tmp_path))
    assert code == 2 and "is a directory" in err


def test_cluster_summary() -> None:
    code, out, _ = run("cluster", "summary", THREE)
    assert code == 0
    for needle in (
        "training",
        "H100-SXM5-80GB",
        "4 × 8 = 32",
        "a100-mig-3g.40gb",
        "time-slicing ×8",
        "16/16",
        "18 nodes, 54 GPUs, 144 slices",
        "$/hour",
    ):
        assert needle in out, needle


def test_cluster_summary_lists_limits_only_where_a_queue_has_them() -> None:
    r = runner.invoke(app, ["cluster", "summary", THREE], env={"COLUMNS": "250"})
    assert r.exit_code == 0
    rows = {
        cells[0]: cells[-2:]
        for line in r.stdout.splitlines()
        if "│ company │" in line
        for cells in [[c.strip() for c in line.strip("│ ").split("│")]]
    }
    # borrow ≤, lend ≤: a limit the policy sets is listed, none is "-" (not a limit of 0)
    assert rows == {
        "research": ["h100-full 16", "-"],
        "production": ["a100-mig-3g.40gb 4", "h100-full 10"],
        "data-science": ["h100-full 10", "-"],
    }


def test_cluster_summary_of_invalid_policy_exits_2() -> None:
    code, _, err = run("cluster", "summary", str(EXAMPLES / "invalid" / "case-study-layout.yaml"))
    assert code == 2 and "mig-layout-invalid" in err


def test_policy_schema_is_json_schema() -> None:
    code, out, _ = run("policy", "schema")
    assert code == 0
    schema = json.loads(out)
    assert schema["title"] == "PolicySpec"
    assert "pools" in schema["properties"]
    assert schema["additionalProperties"] is False


def test_schema_accepts_the_example() -> None:
    import jsonschema
    import yaml

    _, out, _ = run("policy", "schema")
    data = yaml.safe_load(Path(THREE).read_text())
    jsonschema.validate(data, json.loads(out))


def test_catalog_commands(tmp_path: Path) -> None:
    code, out, _ = run("catalog", "list")
    assert code == 0 and "H200-141GB" in out and "Tesla-T4" in out
    code, out, _ = run("catalog", "show", "NVIDIA-H100-80GB-HBM3")
    assert code == 0 and "1g.20gb" in out and "26" in out
    custom = tmp_path / "c.yaml"
    custom.write_text(
        "apiVersion: gpucarve.io/v1alpha1\nkind: GpuCatalog\nmodels:\n"
        "  - {id: T4, extends: T4, pricePerGpuHour: 0.35}\n"
    )
    code, out, _ = run("catalog", "show", "T4", "--catalog", str(custom))
    assert code == 0 and "$0.35/GPU-hour" in out
    custom.write_text(
        "apiVersion: gpucarve.io/v1alpha1\nkind: GpuCatalog\n"
        "models: [{id: T4, extends: T4, bogus: 1}]\n"
    )
    code, _, err = run("catalog", "list", "--catalog", str(custom))
    assert code == 2 and "unknown key 'bogus'" in err


def test_console_script_runs() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpucarve",
            "mig",
            "check",
            "A100-80GB",
            "3g.40gb",
            "3g.40gb",
            "1g.10gb",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "memory slices" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_plan_places_the_example_workloads_and_explains_the_rest() -> None:
    workloads = str(BUILTIN / "three-teams-workloads.yaml")
    code, out, _ = run("plan", THREE, workloads, "--json")
    assert code == 0
    doc = json.loads(out)
    admitted = {a["workload"] for a in doc["admissions"]}
    assert {"research/llm-pretrain", "serving/ranker", "production/embeddings"} <= admitted
    pending = {p["workload"]: p for p in doc["pending"]}
    assert pending["research/llm-finetune"]["stage"] == "quota"
    assert "cohort company has 8 to lend" in pending["research/llm-finetune"]["message"]
    assert pending["research/big-sweep"]["stage"] == "validation"
    assert "queue research can never hold more than 32" in pending["research/big-sweep"]["message"]
    code, out, _ = run("plan", THREE, workloads)
    assert code == 0 and "Pending: 2 workloads" in out


def test_plan_bad_workloads_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("workloads:\n  - {name: x, namespace: research, podSets: [{count: 0}]}\n")
    code, _, err = run("plan", THREE, str(f))
    assert code == 2 and "workloads[0].podSets[0].count" in err and "(line 2)" in err
    f.write_text("just: text\n")
    code, _, err = run("plan", THREE, str(f))
    assert code == 2 and "not-a-workload-list" in err


def test_simulate_writes_identical_results_for_the_same_seed(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    code, out, err = run(
        "simulate", "--policy", THREE, "--days", "0.3", "--seed", "7", "--out", str(a)
    )
    assert code == 0
    assert f"wrote {a / 'results.json'} and {a / 'report.html'}" in err.replace("\n", "")
    assert f"{a / 'dashboard.html'}" in err.replace("\n", "")
    assert "GPU allocation (time-weighted)" in out and "kube-default" in out
    assert "gpucarve against kube-default" in out
    run("simulate", "--policy", THREE, "--days", "0.3", "--seed", "7", "--out", str(b))
    assert (a / "results.json").read_bytes() == (b / "results.json").read_bytes()
    doc = json.loads((a / "results.json").read_text())
    assert set(doc["results"]) == {"kube-default", "static-quota", "gpucarve"}
    ours = doc["results"]["gpucarve"]
    assert ours["workloads"] > 0
    assert set(ours["teams"]) == {"research", "production", "data-science"}
    assert doc["results"]["gpucarve"]["gpu_hours_held_by_incomplete_gangs"] == 0.0


def test_simulate_one_policy_and_unknown_policy(tmp_path: Path) -> None:
    code, out, _ = run(
        "simulate", "--days", "0.2", "--compare", "gpucarve", "--json", "--out", str(tmp_path)
    )
    assert code == 0 and list(json.loads(out)["results"]) == ["gpucarve"]
    code, _, err = run("simulate", "--compare", "slurm")
    assert code == 2 and "[unknown-policy]" in err and "no policy slurm" in err and "fix:" in err


def test_simulate_bad_policy_exits_2() -> None:
    code, _, err = run("simulate", "--policy", str(EXAMPLES / "invalid" / "unknown-key.yaml"))
    assert code == 2 and "unknown-key" in err


def test_simulate_a_trace_file_and_bad_trace(tmp_path: Path) -> None:
    trace = str(BUILTIN / "traces" / "three-teams-small.csv")
    code, out, _ = run("simulate", "--trace", trace, "--json", "--out", str(tmp_path))
    assert code == 0
    doc = json.loads(out)
    assert doc["trace"] == trace and doc["results"]["gpucarve"]["workloads"] == 7
    bad = tmp_path / "bad.csv"
    bad.write_text(Path(trace).read_text() + "x,research,,,0,100,1,,lots,,,,,,,,\n")
    code, _, err = run("simulate", "--trace", str(bad), "--out", str(tmp_path))
    assert code == 2 and "line 9" in err and "gpus is 'lots'" in err
    code, _, err = run("simulate", "--trace", str(bad), "--lenient", "--out", str(tmp_path))
    assert code == 0 and "skipped 1 bad rows" in err


def test_bench_fill_json_shape_and_bad_input(tmp_path: Path) -> None:
    trace = public_trace("alibaba-gpu-v2023")
    args = [
        "bench",
        "fill",
        "--nodes",
        str(trace / "openb_node_list_gpu_node.csv"),
        "--pods",
        str(trace / "openb_pod_list_multigpu50.csv"),
    ]
    code, out, _ = run(*args, "--policy", "best-fit", "--seeds", "42", "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"best-fit"} and set(doc["best-fit"]) == {"90", "95", "100", "130"}
    assert set(doc["best-fit"]["100"]) == {"mean", "std"} and doc["best-fit"]["100"]["std"] == 0.0
    code, out, _ = run(*args, "--policy", "best-fit", "--seeds", "42", "--bound", "--json")
    assert code == 0
    doc = json.loads(out)  # HiGHS's banner goes to stderr: stdout stays one document
    free = "bound, any pod may be left out"
    assert set(doc) == {"best-fit", "bound", free, "best-fit / bound", "left out at 100 %"}
    for mark in ("90", "95", "100", "130"):
        got, bound = doc["best-fit"][mark]["mean"], doc["bound"][mark]["mean"]
        assert got <= bound + 1e-9 and bound <= doc[free][mark]["mean"] + 1e-9
        assert doc["best-fit / bound"][mark]["mean"] == pytest.approx(100 * got / bound, abs=0.02)
    # given out plus left out is what arrived by the 100 % mark: within one pod of capacity
    left = doc["left out at 100 %"]
    for name in ("best-fit", "bound", free):
        total = doc[name]["100"]["mean"] + sum(row[name]["share"] for row in left.values())
        assert 99.8 <= total <= 100 + 1e-6, name
    code, out, _ = run(*args, "--policy", "best-fit", "--seeds", "42", "--bound")
    assert code == 0 and "left out at 100 % arrived" in " ".join(out.split())
    code, _, err = run(*args, "--seeds", "51-42")
    assert code == 2 and "--seeds" in err
    code, _, err = run(*args, "--policy", "tetris")
    assert code == 2 and "[unknown-policy]" in err and "no policy tetris" in err
    code, _, err = run(
        "bench", "fill", "--nodes", str(tmp_path / "none.csv"), "--pods", str(tmp_path / "none.csv")
    )
    assert code == 2 and "no such file" in err


def test_simulate_says_how_it_compares_with_the_case_study(tmp_path: Path) -> None:
    code, out, _ = run("simulate", "--days", "0.3", "--seed", "3", "--out", str(tmp_path))
    assert code == 0
    flat = " ".join(out.split())
    named = "Against the published case study the three-team example follows"
    assert named in flat and "points from their 72.0%" in flat
    assert named in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("content", [None, "", "apiVersion: v1\nkind: Config\n"])
def test_queues_with_an_unusable_kubeconfig_says_so(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "kc"
    if content is not None:
        path.write_text(content)
    code, _, err = run("queues", "--kubeconfig", str(path))
    assert code == 2
    assert "cannot use the kubeconfig" in err and "fix:" in err


def test_new_commands_answer_bad_paths_without_a_traceback(tmp_path: Path) -> None:
    code, _, err = run("mig", "import", str(tmp_path))
    assert code == 2 and "not-a-file" in err and "Traceback" not in err
    state = tmp_path / "dc"
    state.mkdir()
    (state / "pids.json").write_text("{")
    code, _, err = run("dev-cluster", "down", "--dir", str(state))
    assert code == 2 and "not the PID file" in err and "fix:" in err
    afile = tmp_path / "afile"
    afile.write_text("")
    code, _, err = run("dev-cluster", "up", "--policy", THREE, "--dir", str(afile))
    assert code == 2 and "is a file, not a folder" in err


def test_simulate_with_every_rule_checked_after_every_cycle(tmp_path: Path) -> None:
    code, _, _ = run("simulate", "--days", "0.5", "--check-invariants", "--out", str(tmp_path))
    assert code == 0
    code, _, _ = run("simulate", "--days", "0.5", "--out", str(tmp_path / "plain"))
    assert code == 0
    checked = json.loads((tmp_path / "results.json").read_text())
    assert checked == json.loads((tmp_path / "plain" / "results.json").read_text())


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["explain", "no-slash", "--policy", str(BUILTIN / "three-teams.yaml")], "NAMESPACE/NAME"),
        (["explain", "a/b/c", "--policy", str(BUILTIN / "three-teams.yaml")], "NAMESPACE/NAME"),
        (["explain", "research/p"], "--policy FILE or --policy-config-map"),
        (
            ["explain", "research/p", "--policy", "x.yaml", "--policy-config-map", "a/b"],
            "--policy FILE or --policy-config-map",
        ),
        (["plan", "--explain", "research/nope"], "no such workload"),
    ],
)
def test_explain_bad_arguments_exit_2(args: list[str], needle: str) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output


def test_plan_explains_a_workload_it_leaves_pending() -> None:
    r = runner.invoke(app, ["plan", "--explain", "research/big-sweep"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("workload research/big-sweep: 5 pods (all at once)")
    assert any(x.startswith("decision: validation/ceiling: ") for x in lines)
    assert "  - never under this policy as it is: change the request or the policy" in lines


def test_usage_errors_name_the_option_a_code_and_the_fix() -> None:
    def console(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpucarve", *args], capture_output=True, text=True, check=False
        )

    proc = console("simulate", "--sed", "4")
    assert proc.returncode == 2
    assert "error: --sed [no-such-option]" in proc.stderr
    assert "fix: use --seed; `" in proc.stderr and "simulate --help` lists every" in proc.stderr
    proc = console("plan", "--now", "-1")
    assert proc.returncode == 2 and "error: --now [bad-parameter]" in proc.stderr
    assert "greater than or equal to 0" in proc.stderr and "fix:" in proc.stderr
    proc = console("frobnicate")
    assert proc.returncode == 2 and "error: frobnicate [usage]" in proc.stderr
    assert "--help` lists the commands" in proc.stderr
    assert "Traceback" not in proc.stderr and "╭" not in proc.stderr
    # a command misspelt: the closest ones named
    proc = console("valdate")
    assert proc.returncode == 2 and "fix: did you mean validate? `" in proc.stderr
    proc = console("mig", "chek")
    assert proc.returncode == 2 and "did you mean check?" in proc.stderr


def test_the_policy_may_be_given_as_simulate_takes_it() -> None:
    code, out, _ = run("validate", "--policy", THREE)
    assert code == 0 and "valid policy" in out
    code, out, _ = run("cluster", "summary", "--policy", THREE)
    assert code == 0 and "Pools of three-teams" in out
    workloads = str(Path(THREE).parent / "three-teams-workloads.yaml")
    code, out, _ = run("plan", "--policy", THREE, workloads, "--json")
    assert code == 0 and json.loads(out)["admissions"]
    code, _, err = run("validate", THREE, "--policy", workloads)
    assert code == 2 and "[two-policies]" in err and "give it once" in err
    # and simulate takes it as validate and plan do: as FILE too
    code, out, _ = run("simulate", THREE, "--days", "0.1", "--json", "--compare", "gpucarve")
    assert code == 0 and json.loads(out)["policy"] == "three-teams"
    code, _, err = run("simulate", THREE, "--policy", workloads, "--days", "0.1")
    assert code == 2 and "[two-policies]" in err


def test_mig_import_reads_every_configuration_and_prints_a_yaml_stream(tmp_path: Path) -> None:
    import yaml as _yaml

    inner = {"version": "v1", "mig-configs": {
        "a": [{"device-filter": "0x20B510DE", "devices": "all", "mig-enabled": True,
               "mig-devices": {"1g.10gb": 7}}],
        "b": [{"device-filter": "0x20B510DE", "devices": [0], "mig-enabled": True,
               "mig-devices": {"3g.40gb": 2}},
              {"device-filter": "0x20B510DE", "devices": [1], "mig-enabled": False}]}}  # fmt: skip
    f = tmp_path / "cm.yaml"
    f.write_text(_yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "m"},
                                  "data": {"config.yaml": _yaml.safe_dump(inner)}}))  # fmt: skip
    code, out, err = run("mig", "import", str(f))
    assert code == 0, err
    blocks = [d for d in _yaml.safe_load_all(out) if d]
    assert [b["mig"] for b in blocks] == [
        {"layout": {"1g.10gb": 7}},
        {"perGpu": [{"gpus": [0], "layout": {"3g.40gb": 2}}]},
    ]
    assert "configuration b: devices [1] without MIG" in out
    assert "2 configurations read" in err


def test_the_readmes_usage_lists_every_command() -> None:
    import re

    import typer.main

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    usage = readme.split("## Usage", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    group = typer.main.get_command(app)
    wanted = []
    for name, cmd in sorted(group.commands.items()):  # type: ignore[attr-defined]
        subs = sorted(getattr(cmd, "commands", {}))
        wanted += [f"{name} {s}" for s in subs] if subs else [name]
    missing = [w for w in wanted if not re.search(rf"(gpucarve|\|) {re.escape(w)}\b", usage)]
    assert missing == []


def test_every_help_names_every_option_whole_at_80_columns() -> None:
    import typer.main

    group = typer.main.get_command(app)
    cut = []
    for name, cmd in sorted(group.commands.items()):  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", None) or {None: cmd}
        for sub, leaf in sorted(subs.items(), key=lambda kv: str(kv[0])):
            args = [name] + ([sub] if sub else []) + ["--help"]
            r = runner.invoke(app, args, env={"COLUMNS": "80"}, terminal_width=80)
            assert r.exit_code == 0, (args, r.output)
            for param in leaf.params:
                for opt in param.opts:
                    if opt.startswith("--") and opt not in r.stdout:
                        cut.append(f"{' '.join(args[:-1])} {opt}")
            assert "…" not in r.stdout, args
    assert cut == []


def test_simulate_piped_writes_no_blank_lines_where_its_progress_bars_were() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpucarve", "simulate", "--days", "0.1", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stderr.splitlines() if not line.strip()] == []
    assert json.loads(proc.stdout)["results"]


UNPRICED = """\
apiVersion: gpucarve.io/v1alpha1
kind: Policy
metadata: {name: mixed-prices}
pools:
  - {name: train, gpuModel: H100-SXM5-80GB, nodes: 2, gpusPerNode: 8, sharing: exclusive}
  - {name: infer, gpuModel: A30-24GB, nodes: 1, gpusPerNode: 4, sharing: exclusive}
queues:
  - {name: research, namespaces: [research], quota: {h100-full: {nominal: 16}}}
"""


def test_a_pool_without_a_price_leaves_the_others_total_marked(tmp_path: Path) -> None:
    """The catalog has no price for the A30: the total is the priced pools' sum, marked, with
    the pool named and the fix, instead of n/a for the whole cluster."""
    path = tmp_path / "policy.yaml"
    path.write_text(UNPRICED)
    code, out, _ = run("cluster", "summary", str(path))
    assert code == 0
    total = next(line for line in out.splitlines() if "total" in line)
    assert "$52.64*" in total and "n/a" not in total  # 16 H100 at the catalog's $3.29
    assert "* without pool infer: no price for its model" in out and "pricePerGpuHour" in out


def test_output_fits_a_terminal_and_pipes_get_a_wide_fixed_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    import os

    from gpucarve.cli import output

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(output.shutil, "get_terminal_size",
                        lambda fallback: os.terminal_size((80, 24)))  # fmt: skip
    assert output.width_for(Tty()) == 80  # an 80-column terminal: tables fit it
    assert output.width_for(io.StringIO()) == output.PIPE_WIDTH  # a pipe
    monkeypatch.setenv("COLUMNS", "200")
    assert output.width_for(Tty()) == output.width_for(io.StringIO()) == 200


def test_dev_clusters_first_pod_asks_for_what_a_queue_has_quota_for() -> None:
    """`dev-cluster up` prints a first pod its policy can run: a whole GPU where a queue has
    quota for one, else the first device-plugin flavor a queue has (a MIG instance here)."""
    import io

    from rich.console import Console

    from gpucarve.cli.devcluster_cmd import _next_steps
    from gpucarve.core.policy import Policy
    from tests.engine.builders import policy, pool, queue

    def printed(p: Policy) -> str:
        out = io.StringIO()
        _next_steps(Console(file=out, width=400), p, Path("p.yaml"))
        return out.getvalue()

    mig = policy(
        pools=[pool("inf", "A100-80GB", 1, 2, "mig", mig={"layout": {"3g.40gb": 2}})],
        queues=[queue("serve", {"a100": {"nominal": 2}})],  # a GPU unit's quota
    )
    said = printed(mig)
    assert '"namespace":"serve"' in said and '"nvidia.com/mig-3g.40gb":1' in said
    assert "gpucarve explain serve/hello-gpu --policy p.yaml" in said
    whole = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("research", {"h100-full": {"nominal": 8}})],
    )
    assert '"nvidia.com/gpu":1' in printed(whole)
