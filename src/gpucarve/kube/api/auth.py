"""Where the API server is and who gpucarve is to it, from the configuration users have.

The official Kubernetes client's loaders read it (`kubernetes.config`): kubeconfig files
(`--kubeconfig`, or every file `KUBECONFIG` lists, merged), contexts (`--context`), static
tokens and `tokenFile`, client certificates (files or data), exec credential plugins
(`client.authentication.k8s.io/v1` and `v1beta1`, as EKS, GKE and AKS ship them; tokens
renewed when they expire) and, inside a pod, the service account (the projected token re-read
as the kubelet rotates it, the mounted CA, `KUBERNETES_SERVICE_HOST/PORT`). Only the transport
stays gpucarve's own (`kube.client`): the binding path keeps one keep-alive connection per
thread, which the library's urllib3 pool adds nothing to and its model layer slows down.

Failures a user can cause become `ConfigProblem`: one line naming what is wrong and the fix.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucarve.config.yaml_source import read_yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = Path("~/.kube/config")
RECHECK_S = 1.0  # how often a token's expiry is looked at


class ConfigProblem(Exception):
    """The configuration cannot be used; the message names it and says how to fix it."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what}; fix: {fix}")
        self.what, self.fix = what, fix


class _Captured(logging.Handler):
    """The loaders log an exec plugin's failure instead of raising it; keep the message."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass
class Credentials:
    """The server, the TLS settings and a bearer token kept fresh (exec plugins and rotated
    service-account tokens renew through the library's refresh hook)."""

    server: str
    source: str  # where it came from, for messages
    ssl_context: ssl.SSLContext
    _config: Any
    _reload: Callable[[], Any]
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _token: str | None = None
    _checked: float = float("-inf")

    def authorization(self) -> str | None:
        """The Authorization header. The library's hook (expiry check, token-file re-read)
        runs at most once a second: every binding calls this, from many threads."""
        now = time.monotonic()
        if now - self._checked < RECHECK_S:
            return self._token
        with self._lock:
            hook = getattr(self._config, "refresh_api_key_hook", None)
            if hook is not None:
                hook(self._config)
            token = self._config.api_key.get("BearerToken")
            self._token = str(token) if token else None
            self._checked = now
        return self._token

    def renew(self) -> None:
        """After a 401: load again (run the exec plugin, read the token file) whatever the
        expiry says."""
        with self._lock:
            self._config = self._reload()
            self._checked = float("-inf")


def _ssl_context(config: Any) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if not config.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif config.ssl_ca_cert:
        context.load_verify_locations(cafile=config.ssl_ca_cert)
    if config.cert_file and config.key_file:
        context.load_cert_chain(config.cert_file, config.key_file)
    return context


def _check_files(paths: list[Path]) -> None:
    """Each kubeconfig through the guarded YAML reader first (no alias bombs, clear errors
    for a file that is not YAML); the library then reads them as kubectl would."""
    from gpucarve.core.problems import InvalidInput

    for path in paths:
        if not path.exists():
            raise ConfigProblem(f"kubeconfig {path}: no such file", "pass --kubeconfig FILE")
        try:
            doc = read_yaml(path, "a kubeconfig")
        except InvalidInput as exc:
            p = exc.problems[0]
            where = f" (line {p.line})" if p.line else ""
            raise ConfigProblem(f"kubeconfig {path}{where}: {p.message}", p.fix) from None
        if not isinstance(doc.data, dict):
            raise ConfigProblem(f"kubeconfig {path}: not a kubeconfig", "pass a kubeconfig file")


def _from_kubeconfig(files: list[Path], context: str | None) -> Callable[[], Any]:
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import load_kube_config

    joined = os.pathsep.join(str(f) for f in files)

    def load() -> Any:
        config = Configuration()
        captured = _Captured()
        root = logging.getLogger()
        root.addHandler(captured)
        try:
            load_kube_config(joined, context, config, persist_config=False)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise ConfigProblem(f"kubeconfig {joined}: {_first_line(exc)}", _fix_for(exc)) from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigProblem(
                f"kubeconfig {joined}: not usable ({type(exc).__name__}: {_first_line(exc)})",
                "check the file with `kubectl config view`",
            ) from None
        finally:
            root.removeHandler(captured)
        if captured.messages and not (config.api_key.get("BearerToken") or config.cert_file):
            raise ConfigProblem(
                f"kubeconfig {joined}: the exec credential plugin failed: "
                f"{_first_line(captured.messages[-1])}",
                "run the plugin's command by hand, install it or log in again",
            )
        return config

    return load


def _in_cluster(folder: Path) -> Callable[[], Any]:
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader

    def load() -> Any:
        config = Configuration()
        try:
            loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
                token_filename=str(folder / "token"), cert_filename=str(folder / "ca.crt")
            )
            loader.load_and_set(config)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise ConfigProblem(
                f"in-cluster configuration ({folder}): {_first_line(exc)}",
                "mount the service-account token (automountServiceAccountToken: true)",
            ) from None
        return config

    return load


def _first_line(exc: object) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _fix_for(exc: object) -> str:
    text = str(exc)
    if "context" in text.lower():
        return "name one of the contexts `kubectl config get-contexts` lists with --context"
    if "exec" in text.lower():
        return "install the credential plugin the kubeconfig's exec section names"
    return "check the file with `kubectl config view`"


def load_credentials(
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    service_account_dir: Path | None = None,
) -> Credentials:
    """As kubectl finds its configuration: `kubeconfig` (several files joined by ':'), else
    `KUBECONFIG`, else the pod's service account when running in a pod, else
    ~/.kube/config."""
    folder = service_account_dir or Path(
        os.environ.get("GPUCARVE_SERVICE_ACCOUNT_DIR") or SERVICE_ACCOUNT_DIR
    )
    named = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG", "")
    if named:
        files = [Path(f).expanduser() for f in named.split(os.pathsep) if f]
        _check_files(files)
        reload, source = _from_kubeconfig(files, context), named
    elif os.environ.get("KUBERNETES_SERVICE_HOST") and (folder / "token").exists():
        if context:
            raise ConfigProblem("--context names a kubeconfig context", "pass --kubeconfig too")
        reload, source = _in_cluster(folder), f"in-cluster service account ({folder})"
    else:
        default = DEFAULT_KUBECONFIG.expanduser()
        _check_files([default])
        reload, source = _from_kubeconfig([default], context), str(default)
    config = reload()
    try:
        ssl_context = _ssl_context(config)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigProblem(
            f"{source}: the certificates cannot be used ({_first_line(exc)})",
            "check certificate-authority and client-certificate in the kubeconfig",
        ) from None
    return Credentials(str(config.host).rstrip("/"), source, ssl_context, config, reload)
