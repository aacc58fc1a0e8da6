"""`gpucarve apply` puts the policy's queues and priority classes on a real API server;
`gpucarve queues` reads them back; applying again changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack
from tests.integration.api import Api
from tests.paths import BUILTIN, EXAMPLES

pytestmark = pytest.mark.integration
EXAMPLE = BUILTIN / "three-teams.yaml"


def test_apply_then_read_back(stack: LocalStack, admin: Api) -> None:
    runner = CliRunner()
    kubeconfig = str(stack.kubeconfig(ADMIN_USER))
    args = ["apply", "--policy", str(EXAMPLE), "--kubeconfig", kubeconfig]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "Queue/research applied" in r.output
    research = admin.get("/apis/gpucarve.io/v1alpha1/queues/research")
    assert research["spec"]["cohort"] == "company"
    assert research["spec"]["weight"] == 2
    assert research["spec"]["quota"]["h100-full"] == {"nominal": 16, "borrowingLimit": 16}
    data_science = admin.get("/apis/gpucarve.io/v1alpha1/queues/data-science")
    assert data_science["spec"]["quota"]["h100-full"] == {"nominal": 6, "borrowingLimit": 10}
    production = admin.get("/apis/gpucarve.io/v1alpha1/queues/production")
    assert production["spec"]["quota"]["h100-full"] == {"nominal": 10, "lendingLimit": 10}
    critical = admin.get("/apis/scheduling.k8s.io/v1/priorityclasses/production-critical")
    assert critical["value"] == 100000
    assert critical["metadata"]["labels"]["gpucarve.io/preemptible"] == "false"
    version = research["metadata"]["resourceVersion"]

    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    after = admin.get("/apis/gpucarve.io/v1alpha1/queues/research")
    assert after["metadata"]["resourceVersion"] == version  # nothing changed

    listed = runner.invoke(app, ["queues", "--kubeconfig", kubeconfig])
    assert listed.exit_code == 0, listed.output
    flat = " ".join(listed.output.split())
    for name in ("research", "production", "data-science"):
        assert name in flat


def test_apply_to_an_unreachable_cluster_says_so(tmp_path: Path, stack: LocalStack) -> None:
    config = stack.kubeconfig(ADMIN_USER).read_text().replace(stack.server, "https://127.0.0.1:1")
    path = tmp_path / "kubeconfig"
    path.write_text(config)
    r = CliRunner().invoke(app, ["apply", "--policy", str(EXAMPLE), "--kubeconfig", str(path)])
    assert r.exit_code == 2
    assert "cannot reach" in r.output


def test_the_scheduler_against_an_unreachable_cluster_says_so(
    tmp_path: Path, stack: LocalStack
) -> None:
    config = stack.kubeconfig(ADMIN_USER).read_text().replace(stack.server, "https://127.0.0.1:1")
    path = tmp_path / "kubeconfig"
    path.write_text(config)
    args = ["scheduler", "--policy", str(EXAMPLE), "--kubeconfig", str(path)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert "cannot reach" in r.output and "fix: pass --kubeconfig" in r.output


def test_the_scheduler_with_a_missing_kubeconfig_says_so(tmp_path: Path) -> None:
    args = ["scheduler", "--policy", str(EXAMPLE), "--kubeconfig", str(tmp_path / "nope")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert "no such file" in r.output


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--leader-pod", "gpucarve-0"), ("--leader-pod", "ns/a/b"), ("--mig-config-map", "cm")],
)
def test_the_scheduler_refuses_a_name_that_is_not_namespace_slash_name(
    tmp_path: Path, flag: str, value: str
) -> None:
    args = ["scheduler", "--policy", str(EXAMPLE), "--kubeconfig", str(tmp_path / "k"), flag, value]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert f"{flag} {value!r} is not NAMESPACE/NAME" in r.output
    assert f"fix: e.g. {flag} " in r.output and "Traceback" not in r.output


def test_apply_diff_says_what_would_change_and_changes_nothing(
    stack: LocalStack, admin: Api, tmp_path: Path
) -> None:
    runner = CliRunner()
    kubeconfig = str(stack.kubeconfig(ADMIN_USER))
    r = runner.invoke(app, ["apply", "--policy", str(EXAMPLE), "--kubeconfig", kubeconfig])
    assert r.exit_code == 0, r.output
    same = runner.invoke(
        app, ["apply", "--diff", "--policy", str(EXAMPLE), "--kubeconfig", kubeconfig]
    )
    assert same.exit_code == 0, same.output
    assert "change:" not in same.output and "create:" not in same.output
    assert "nothing was changed" in same.output
    # research weighs more, and data-science is gone (its namespaces with it)
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["queues"] = [q for q in doc["queues"] if q["name"] != "data-science"]
    del doc["objective"]["waitP95Seconds"]["data-science"]  # its bound goes with it
    next(q for q in doc["queues"] if q["name"] == "research")["weight"] = 3
    changed = tmp_path / "policy.yaml"
    changed.write_text(yaml.safe_dump(doc))
    before = admin.get("/apis/gpucarve.io/v1alpha1/queues/research")["metadata"]["resourceVersion"]
    r = runner.invoke(
        app, ["apply", "--diff", "--policy", str(changed), "--kubeconfig", kubeconfig]
    )
    assert r.exit_code == 0, r.output
    flat = "\n".join(line.strip() for line in r.output.splitlines())
    assert "change: Queue/research" in flat
    assert "-weight: 2" in flat.replace("  ", "") and "+weight: 3" in flat.replace("  ", "")
    assert "stays: Queue/data-science" in flat
    assert "change: Queue/production" not in flat
    after = admin.get("/apis/gpucarve.io/v1alpha1/queues/research")
    assert after["metadata"]["resourceVersion"] == before and after["spec"]["weight"] == 2


def test_apply_writes_the_cohort_tree_and_diff_names_a_cohort_left_behind(
    stack: LocalStack, admin: Api
) -> None:
    runner = CliRunner()
    kubeconfig = str(stack.kubeconfig(ADMIN_USER))
    tree = EXAMPLES / "departments" / "policy.yaml"
    r = runner.invoke(app, ["apply", "--policy", str(tree), "--kubeconfig", kubeconfig])
    assert r.exit_code == 0, r.output
    assert r.output.index("Cohort/ml applied") < r.output.index("Queue/research applied")
    ml = admin.get("/apis/gpucarve.io/v1alpha1/cohorts/ml")
    assert ml["spec"]["parent"] == "company"
    assert admin.get("/apis/gpucarve.io/v1alpha1/queues/research")["spec"]["cohort"] == "ml"
    try:
        # back to the flat example: research rejoins company, and ml is left behind
        r = runner.invoke(
            app, ["apply", "--diff", "--policy", str(EXAMPLE), "--kubeconfig", kubeconfig]
        )
        assert r.exit_code == 0, r.output
        flat = "\n".join(line.strip() for line in r.output.splitlines())
        assert "change: Queue/research" in flat and "stays: Cohort/ml" in flat
        assert "change: Cohort/company" in flat  # its description is the example's own
    finally:
        r = runner.invoke(app, ["apply", "--policy", str(EXAMPLE), "--kubeconfig", kubeconfig])
        assert r.exit_code == 0, r.output
        admin.call("DELETE", "/apis/gpucarve.io/v1alpha1/cohorts/ml")
