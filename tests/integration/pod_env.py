"""What the chart's pod gives the scheduler, made on this machine: the service-account folder
(a TokenRequest token, the API server's CA, the namespace), the in-cluster variables, and the
policy ConfigMap mounted as the kubelet mounts one (files behind a `..data` symlink that is
swapped atomically on a change)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpucarve.devcluster.stack import LocalStack
from tests.integration.api import Api
from tests.integration.chart import NAMESPACE

SERVICE_ACCOUNT = "gpucarve"


def token(
    admin: Api,
    bound_secret: str | None = None,
    seconds: int = 3600,
    service_account: str = SERVICE_ACCOUNT,
) -> str:
    """A token for the chart's ServiceAccount from the TokenRequest API (bound to a Secret:
    it dies with it)."""
    spec: dict[str, Any] = {"expirationSeconds": seconds}
    if bound_secret is not None:
        secret = admin.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{bound_secret}")
        spec["boundObjectRef"] = {"kind": "Secret", "apiVersion": "v1", "name": bound_secret,
                                  "uid": secret["metadata"]["uid"]}  # fmt: skip
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{service_account}/token"
    status, reply = admin.call("POST", path, body)
    assert status == 201, reply
    return str(reply["status"]["token"])


def service_account_dir(folder: Path, stack: LocalStack, token_value: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(folder / "token", token_value)
    # the API server's self-signed serving certificate is its own CA
    shutil.copyfile(stack.workdir / "certs" / "apiserver.crt", folder / "ca.crt")
    (folder / "namespace").write_text(NAMESPACE)
    return folder


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.replace(path)


class ConfigMapMount:
    """A folder laid out as the kubelet lays out a mounted ConfigMap."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder, self.key, self.version = folder, key, 0
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        return self.folder / self.key

    def write(self, text: str) -> None:
        self.version += 1
        data = self.folder / f"..v{self.version}"
        data.mkdir()
        (data / self.key).write_text(text)
        link = self.folder / "..data_tmp"
        link.symlink_to(data.name)
        link.replace(self.folder / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to(Path("..data") / self.key)


def pod_environment(stack: LocalStack, sa_dir: Path, pod_name: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update(
        KUBERNETES_SERVICE_HOST="127.0.0.1",
        KUBERNETES_SERVICE_PORT=str(stack.api_port),
        GPUCARVE_SERVICE_ACCOUNT_DIR=str(sa_dir),
        POD_NAME=pod_name,
        POD_NAMESPACE=NAMESPACE,
        HOME=str(home),
    )
    return env


def container_args(deployment: dict[str, Any], env: dict[str, str], **replace: str) -> list[str]:
    """The Deployment's container arguments, `$(VAR)` expanded as the kubelet does, with some
    `--flag=value` arguments replaced (paths and ports of this machine)."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    out = []
    for arg in container["args"]:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)
        flag = arg.split("=", 1)[0].removeprefix("--").replace("-", "_")
        if flag in replace:
            arg = f"{arg.split('=', 1)[0]}={replace[flag]}"
        out.append(arg)
    return out


def start_scheduler(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`gpucarve ARGS` as the image's entrypoint runs it."""
    return subprocess.Popen(
        [sys.executable, "-m", "gpucarve", *args],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
