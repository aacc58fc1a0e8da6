"""How users reach the API server, against the real one: exec credential plugins (v1 and
v1beta1, renewed when their token expires), tokenFile, KUBECONFIG with several files,
--context; and every failure a user can cause said in one line with the fix."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.devcluster.stack import ADMIN_USER, SCHEDULER_USER, LocalStack
from gpucarve.kube.api.auth import ConfigProblem
from gpucarve.kube.api.client import ApiError, Client
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration
PLUGIN = Path(__file__).parent / "plugins" / "exec_credential.py"


def _kubeconfig(stack: LocalStack, user: dict[str, Any], extra: dict[str, Any] | None = None,
                ) -> dict[str, Any]:  # fmt: skip
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": stack.server,
                                                    "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "local", "user": "u"}}],
        "current-context": "c",
    }  # fmt: skip
    doc.update(extra or {})
    return doc


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _exec_user(tmp: Path, stack: LocalStack, version: str, lifetime: float, fail: bool = False,
               command: str = sys.executable) -> dict[str, Any]:  # fmt: skip
    token = tmp / "token"
    token.write_text(stack.tokens[ADMIN_USER])
    args = [str(PLUGIN), f"client.authentication.k8s.io/{version}", str(token),
            str(tmp / "runs"), str(lifetime)] + (["fail"] if fail else [])  # fmt: skip
    exec_: dict[str, Any] = {"apiVersion": f"client.authentication.k8s.io/{version}",
                             "command": command, "args": args}  # fmt: skip
    if version == "v1":
        exec_["interactiveMode"] = "Never"
    return {"exec": exec_}


def _runs(tmp: Path) -> int:
    path = tmp / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_an_exec_plugin_token_is_used_and_renewed_when_it_expires(
    tmp_path: Path, stack: LocalStack, version: str
) -> None:
    kc = _write(tmp_path / "kc", _kubeconfig(stack, _exec_user(tmp_path, stack, version, 2)))
    client = Client.from_kubeconfig(kc)
    assert client.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
    first = _runs(tmp_path)
    assert first >= 1
    time.sleep(3.2)  # past the token's expiry and the once-a-second look at it
    assert client.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
    assert _runs(tmp_path) > first, "the expired token was not renewed"


def test_a_failing_exec_plugin_is_one_line_with_the_fix(tmp_path: Path, stack: LocalStack) -> None:
    kc = _write(tmp_path / "kc", _kubeconfig(stack, _exec_user(tmp_path, stack, "v1", 60, True)))
    with pytest.raises(ConfigProblem) as info:
        Client.from_kubeconfig(kc)
    assert "exec credential plugin failed" in info.value.what
    assert "log in again" in info.value.fix
    result = CliRunner().invoke(app, ["apply", "--policy", str(BUILTIN / "three-teams.yaml"),
                                      "--kubeconfig", str(kc)])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "exec credential plugin failed" in result.output and "fix:" in result.output


def test_a_missing_exec_plugin_says_what_to_install(tmp_path: Path, stack: LocalStack) -> None:
    user = _exec_user(tmp_path, stack, "v1", 60, command="/nonexistent/cloud-auth-plugin")
    kc = _write(tmp_path / "kc", _kubeconfig(stack, user))
    with pytest.raises(ConfigProblem) as info:
        Client.from_kubeconfig(kc)
    assert "No such file or directory: '/nonexistent/cloud-auth-plugin'" in info.value.what
    assert "install it" in info.value.fix


def test_token_file_and_kubeconfig_split_over_two_files(
    tmp_path: Path, stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "token"
    token.write_text(stack.tokens[ADMIN_USER])
    full = _kubeconfig(stack, {"tokenFile": str(token)})
    clusters = _write(tmp_path / "clusters", {"apiVersion": "v1", "kind": "Config",
                                               "clusters": full["clusters"]})  # fmt: skip
    users = _write(tmp_path / "users", {**full, "clusters": []})
    monkeypatch.setenv("KUBECONFIG", f"{clusters}:{users}")
    client = Client.from_kubeconfig()
    assert client.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"


def test_contexts_are_chosen_and_a_missing_one_is_named(tmp_path: Path, stack: LocalStack) -> None:
    doc = _kubeconfig(stack, {"token": "wrong"})
    doc["users"].append({"name": "admin", "user": {"token": stack.tokens[ADMIN_USER]}})
    doc["contexts"].append({"name": "admin", "context": {"cluster": "local", "user": "admin"}})
    kc = _write(tmp_path / "kc", doc)
    with pytest.raises(ApiError) as refused:
        Client.from_kubeconfig(kc).get("/api/v1/namespaces")
    assert refused.value.status == 401
    assert Client.from_kubeconfig(kc, "admin").get("/api/v1/namespaces")["items"]
    with pytest.raises(ConfigProblem) as info:
        Client.from_kubeconfig(kc, "prod")
    assert "prod" in info.value.what and "--context" in info.value.fix


def test_forbidden_names_the_verb_the_object_and_the_fix(stack: LocalStack) -> None:
    # the scheduler's user has no role on this stack's CRDs
    args = ["apply", "--policy", str(BUILTIN / "three-teams.yaml"),
            "--kubeconfig", str(stack.kubeconfig(SCHEDULER_USER))]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "403" in result.output and "forbidden" in result.output
    assert "cannot patch resource" in result.output or "cannot get resource" in result.output
    assert "fix: this identity may not do that" in result.output


def test_a_refused_token_says_log_in_again(tmp_path: Path, stack: LocalStack) -> None:
    kc = _write(tmp_path / "kc", _kubeconfig(stack, {"token": "expired-or-revoked"}))
    args = ["apply", "--policy", str(BUILTIN / "three-teams.yaml"), "--kubeconfig", str(kc)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "401" in result.output
    assert "fix: the credentials were refused: log in again" in result.output
