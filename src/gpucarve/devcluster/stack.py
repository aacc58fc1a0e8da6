"""A real, local Kubernetes control plane as gpucarve ships onto one: etcd, kube-apiserver,
kwok (fake kubelets), kube-controller-manager with the controllers a user's manifests need,
kube-scheduler for the pods gpucarve does not govern, and gpucarve's admission webhook with the
configurations the chart installs.

The same code starts `gpucarve dev-cluster` and every integration test's cluster. A part is
left out only with the reason why (`off={"webhook": "…"}`): a stack without a policy has no
webhook to run and must say so, and `tests/integration/test_stack_as_shipped.py` lists every
scenario that switches a part off. Everything listens on 127.0.0.1 on free ports, keeps its
state in one folder, authenticates with static tokens (RBAC on) and is stopped by PID. The
binaries come from `tools/testenv.sh`, which builds them from their Go modules once per user.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpucarve.core.policy import Policy
from gpucarve.devcluster import webhook
from gpucarve.devcluster.nodes import node_manifests, slice_manifests
from gpucarve.devcluster.procs import SCHEDULER_USER as SCHEDULER_USER
from gpucarve.devcluster.procs import StackError, free_port, free_ports
from gpucarve.render.dra import device_classes

ADMIN_USER = "gpucarve-admin"
# every request's metadata, once its answer is sent
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
"""
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kwok-stages.yaml",
    "promtool",
)


# The parts a stack runs beside etcd and kube-apiserver; each can be left out with a reason.
PARTS = ("kwok", "controllers", "kube-scheduler", "webhook")
_PART_OF = {"kube-controller-manager": "controllers"}  # process -> the part it is
# kube-controller-manager's controllers that a user's manifests rely on: workloads make pods
# (Jobs, CronJobs, Deployments, StatefulSets, DaemonSets), claim templates make claims,
# owners' deletion reaches their pods, namespaces can be deleted, ResourceQuota usage is
# counted, PodDisruptionBudgets are kept, finished Jobs expire. Not the node lifecycle (kwok
# keeps its nodes Ready; with TaintNodesByCondition off no new node waits for it) nor service
# accounts (pods run no process that would use a token). The built-in `admin`, `edit` and
# `view` roles are aggregated by a controller too: a tenant bound to them has their rights.
CONTROLLERS = (
    "clusterrole-aggregation-controller",
    "job-controller", "cronjob-controller", "garbage-collector-controller",
    "deployment-controller", "replicaset-controller", "statefulset-controller",
    "daemonset-controller", "resourceclaim-controller", "resourcequota-controller",
    "namespace-controller", "disruption-controller", "ttl-after-finished-controller",
)  # fmt: skip
# The Workload API's PodGroups are kept from deletion while pods use them (where it is served)
WORKLOAD_API_CONTROLLERS = ("podgroup-protection-controller",)
KUBE_SCHEDULER_CONFIG = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
leaderElection:
  leaderElect: false
"""
_START_ATTEMPTS = 3
# Kubernetes' gang API (the Workload API's PodGroups, KEP-4671) is beta in 1.37 but off by
# default: the stack switches it on, with the topology constraints of its PodGroups, so gangs
# written for it are tested. An older API server (where the gate is alpha, its API another
# version) runs without them. The binaries built from the Go modules carry no version stamp, so
# the gate's stage is read from the API server's own help.
WORKLOAD_API_GATE = "GenericWorkload=true|false (BETA"
WORKLOAD_API_FLAGS = (
    "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true",
    "--runtime-config=scheduling.k8s.io/v1beta1=true",
)


@functools.lru_cache(maxsize=8)
def serves_workload_api(apiserver: Path) -> bool:
    """Whether this kube-apiserver has the Workload API's gate at beta (1.37 on); asked once
    per binary, not at every start."""
    try:
        out = subprocess.run(
            [str(apiserver), "--help"], check=False, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise StackError(f"{apiserver} --help failed: {exc}") from None
    return WORKLOAD_API_GATE in out.stdout + out.stderr


def cache_dir() -> Path:
    """Where `tools/testenv.sh` keeps what it builds, per user (as the script computes it)."""
    if env := os.environ.get("GPUCARVE_TESTENV_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpucarve" / "testenv"


def _cached(needed: Sequence[str]) -> Path | None:
    """The newest complete bin folder in the per-user cache (a pip install has no script to
    ask, but the binaries a checkout built are there)."""
    root = cache_dir()
    if not root.is_dir():
        return None
    done = [d for d in sorted(root.glob("bin-*"), reverse=True) if _complete(d, needed)]
    return done[0] if done else None


def _complete(folder: Path, needed: Sequence[str] = BINARIES) -> bool:
    return all((folder / b).is_file() for b in needed)


def checkout_script() -> Path:
    """`tools/testenv.sh` of the checkout this package runs from (absent in a pip install)."""
    return Path(__file__).resolve().parents[3] / "tools" / "testenv.sh"


def find_binaries(
    bin_dir: str | Path | None = None,
    needed: Sequence[str] = BINARIES,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The folder holding the test environment's binaries (`needed`: what the caller runs):
    `bin_dir`, $GPUCARVE_TESTENV_BIN, what `tools/testenv.sh` prints (it builds them when
    missing) from a checkout, or else the per-user cache that script fills. From a checkout,
    the script's folder is used at once when it holds `needed` (another build holding the
    lock for the rest is not waited for); a build's lines, and a line every `HEARTBEAT_S`
    while it is quiet, go to `progress`."""
    candidates: list[Path] = []
    if bin_dir is not None:
        candidates.append(Path(bin_dir))
    if env := os.environ.get("GPUCARVE_TESTENV_BIN"):
        candidates.append(Path(env))
    for c in candidates:
        if _complete(c, needed):
            return c
    script = checkout_script()
    if not script.is_file():
        cached = _cached(needed)
        if cached is not None:
            return cached
        raise StackError(
            f"{', '.join(needed)} not found in $GPUCARVE_TESTENV_BIN or {cache_dir()}/bin-*: "
            "clone gpucarve and run tools/testenv.sh (it builds them with Go 1.26 from the Go "
            "module proxy into that cache, about 20 minutes cold), or set "
            "GPUCARVE_TESTENV_BIN to a folder holding them"
        )
    where = _script_folder(script)
    if where is not None and _complete(where, needed):
        return where
    found = Path(_run_build(script, progress or (lambda _: None)))
    if not _complete(found, needed):
        raise StackError(f"tools/testenv.sh did not produce {', '.join(needed)} in {found}")
    return found


HEARTBEAT_S = 10.0


def _script_folder(script: Path) -> Path | None:
    """The bin folder the script would fill (None: it could not say)."""
    try:
        env = {**os.environ, "GPUCARVE_TESTENV_WHERE": "1"}
        out = subprocess.run([str(script)], check=True, capture_output=True, text=True,
                             timeout=60, env=env)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return Path(lines[-1]) if lines else None


def _run_build(script: Path, progress: Callable[[str], None]) -> str:
    """Run the build, passing its log lines on as they come and saying every `HEARTBEAT_S`
    that it still runs; the folder it printed last."""
    try:
        proc = subprocess.Popen([str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip
    except OSError as exc:
        raise StackError(f"tools/testenv.sh could not start ({exc})") from None
    assert proc.stdout is not None and proc.stderr is not None
    said: list[str] = []
    started = time.monotonic()
    last = [started]

    def relay() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            progress(line.rstrip())
            last[0] = time.monotonic()

    printed: list[str] = []

    def collect() -> None:
        assert proc.stdout is not None
        printed.extend(proc.stdout)  # read as it comes: a full pipe would stop the build

    readers = [threading.Thread(target=f, daemon=True) for f in (relay, collect)]
    for r in readers:
        r.start()
    while proc.poll() is None:
        time.sleep(0.5)
        if time.monotonic() - last[0] >= HEARTBEAT_S:
            progress(f"testenv: still building ({time.monotonic() - started:.0f} s so far)")
            last[0] = time.monotonic()
    for r in readers:
        r.join(5)
    stdout = "".join(printed)
    if proc.returncode != 0:
        tail = "".join(said)[-600:]
        raise StackError(
            f"tools/testenv.sh could not build the components (exit {proc.returncode}): {tail}; "
            "it needs Go 1.26 and the Go module proxy"
        )
    lines = stdout.strip().splitlines()
    if not lines:
        raise StackError("tools/testenv.sh printed no bin folder")
    return lines[-1]


POD_COMPLETE = "pod-complete"  # kwok's stage that completes a Job's pod


def needed_binaries(off: Mapping[str, str]) -> list[str]:
    """The binaries a stack with these parts off runs."""
    out = ["etcd", "kube-apiserver"]
    if "kwok" not in off:
        out += ["kwok", "kwok-stages.yaml"]
    if "controllers" not in off:
        out.append("kube-controller-manager")
    if "kube-scheduler" not in off:
        out.append("kube-scheduler")
    return out


@dataclass
class LocalStack:
    """The stack as shipped in `workdir`; `start()` then `stop()` (or `with`). `policy` is the
    file the webhook serves (it follows the file's changes); `off` maps each part left out to
    why."""

    bin_dir: Path
    workdir: Path
    policy: Path | None = None
    off: Mapping[str, str] = field(default_factory=dict)
    api_port: int = 0
    tokens: dict[str, str] = field(default_factory=dict)  # user -> bearer token
    # more users, with no group: RBAC gives them what a test binds them to
    users: tuple[str, ...] = ()
    # the API server's audit log (`audit.log` in workdir, every request's metadata): what a
    # client really asked for, for the tests that must show it
    audit: bool = False
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _args: dict[str, list[str]] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def kubeconfig(self, user: str = ADMIN_USER) -> Path:
        return self.workdir / f"kubeconfig-{user}"

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 120.0) -> LocalStack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A port found free can be taken by another process before etcd listens on it (tests
        # run beside other stacks and clients); a start that lost that race is tried again.
        fresh_data = not (self.workdir / "etcd").exists()
        chosen_port = self.api_port
        for attempt in range(_START_ATTEMPTS):
            try:
                return self._start_once(timeout_s)
            except StackError as exc:
                if "address already in use" not in str(exc) or attempt + 1 == _START_ATTEMPTS:
                    raise
                if fresh_data:
                    shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
                self.api_port = chosen_port
        raise AssertionError("unreachable")

    def _check_parts(self) -> None:
        for part, why in self.off.items():
            if part not in PARTS:
                raise StackError(f"off: no part {part!r}; the parts are {', '.join(PARTS)}")
            if not str(why).strip():
                raise StackError(f"off: {part} is left out without a reason; say why")
        if self.policy is None and "webhook" not in self.off:
            raise StackError(
                "a stack without a policy runs no webhook: pass policy=, or say why it is off "
                "(off={'webhook': '…'})"
            )

    def _start_once(self, timeout_s: float) -> LocalStack:
        self._check_parts()
        # The webhook (a Python process, seconds to start) needs no API server to serve:
        # it starts beside the control plane, and is wired in once both are up.
        policy = self.policy if "webhook" not in self.off else None
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            port = free_port()
            served = None if policy is None else pool.submit(
                webhook.start, policy, self.workdir, port)  # fmt: skip
            try:
                self._start_etcd()
                self._start_apiserver()
                self._wait_ready(timeout_s)
                self._start_parts()
                if served is not None and policy is not None:
                    self._procs["webhook"], ca = served.result()
                    self._wire_webhook(policy, port, ca)
            except BaseException:
                if served is not None and served.exception() is None:
                    self._procs.setdefault("webhook", served.result()[0])
                self.stop()
                raise
        return self

    def _start_parts(self) -> None:
        """kwok, the controllers and kube-scheduler, those not off; one that cannot start
        exits at once: said with its log."""
        parts = {"kwok": self._start_kwok, "kube-controller-manager": self._start_controllers,
                 "kube-scheduler": self._start_kube_scheduler}  # fmt: skip
        started = [name for name in parts if _PART_OF.get(name, name) not in self.off]
        for name in started:
            parts[name]()
        time.sleep(0.5)
        for name in started:
            if (proc := self._procs[name]).poll() is not None:
                raise StackError(f"{name} exited with {proc.returncode}: {self.log_tail(name)}")

    def stop(self) -> None:
        for name in ("webhook", "kube-scheduler", "kube-controller-manager", "kwok",
                     "kube-apiserver", "etcd"):  # fmt: skip
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self._procs.items()}

    def detach(self) -> dict[str, int]:
        """Leave the processes running past this object (`stop()` no longer touches them);
        returns their PIDs, by which the caller stops them later."""
        pids = self.pids()
        self._procs.clear()
        return pids

    # ------------------------------------------------------------------ pieces
    def restart(self, name: str, kill: bool = False, down_s: float = 0.0) -> None:
        """Stop one component (SIGKILL when `kill`), leave it down for `down_s`, and start it
        again as it was: same ports, same data; for etcd and kube-apiserver, returns once the
        API server is ready."""
        proc = self._procs[name]
        if kill:
            proc.kill()
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        time.sleep(down_s)
        self._spawn(name, self._args[name])
        if name in ("etcd", "kube-apiserver"):
            self._wait_ready(120)

    def _spawn(self, name: str, args: list[str]) -> None:
        self._args[name] = args
        log = (self.workdir / f"{name}.log").open("ab")
        self._procs[name] = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    def _start_etcd(self) -> None:
        client, peer, metrics = free_ports(3)
        self._etcd = f"http://127.0.0.1:{client}"
        data = self.workdir / "etcd"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--data-dir",
                str(data),
                "--listen-client-urls",
                self._etcd,
                "--advertise-client-urls",
                self._etcd,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
                "--listen-metrics-urls",
                f"http://127.0.0.1:{metrics}",
                "--unsafe-no-fsync",
            ],
        )

    def _start_apiserver(self) -> None:
        self.api_port = self.api_port or free_port()
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        key = certs / "sa.key"
        if not key.exists():
            if shutil.which("openssl") is None:
                raise StackError("openssl is needed to make the service-account key")
            subprocess.run(
                ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
            )
            subprocess.run(
                ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(certs / "sa.pub")],
                check=True,
                capture_output=True,
            )
        for user in (ADMIN_USER, SCHEDULER_USER, *self.users):
            self.tokens.setdefault(user, secrets.token_hex(16))
        # token,user,uid,"groups": the admin is a cluster admin; the scheduler gets RBAC later
        lines = [
            f'{self.tokens[ADMIN_USER]},{ADMIN_USER},1,"system:masters"',
            f"{self.tokens[SCHEDULER_USER]},{SCHEDULER_USER},2",
            *(f"{self.tokens[u]},{u},{3 + i}" for i, u in enumerate(self.users)),
        ]
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n")
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self._etcd}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={certs}",
                "--service-cluster-ip-range=10.0.0.0/24",
                f"--service-account-key-file={certs / 'sa.pub'}",
                f"--service-account-signing-key-file={key}",
                "--service-account-issuer=https://gpucarve.local",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--endpoint-reconciler-type=none",
                # as kubeadm and the managed clusters run it: privileged pods are the cluster's
                # policy to allow (gpucarve's webhook refuses them in governed namespaces)
                "--allow-privileged=true",
                # No controller-manager runs: no ServiceAccount is ever created for pods, and
                # no node lifecycle controller would lift the not-ready taint that
                # TaintNodesByCondition puts on every new node once kwok makes it Ready.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                *self._version_flags(),
                *self._audit_flags(),
            ],
        )
        for user in (ADMIN_USER, SCHEDULER_USER, *self.users):
            self._write_kubeconfig(user)

    def _audit_flags(self) -> tuple[str, ...]:
        if not self.audit:
            return ()
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return (
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.workdir / 'audit.log'}",
            "--audit-log-format=json",
        )

    def audited(self, user: str) -> list[dict[str, Any]]:
        """The audit log's events of `user`'s requests (with `audit` on)."""
        path = self.workdir / "audit.log"
        if not path.exists():
            return []
        events = (json.loads(x) for x in path.read_text().splitlines() if x.strip())
        return [e for e in events if (e.get("user") or {}).get("username") == user]

    def _version_flags(self) -> tuple[str, ...]:
        return WORKLOAD_API_FLAGS if serves_workload_api(self.bin_dir / "kube-apiserver") else ()

    def _write_kubeconfig(self, user: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpucarve-local",
                    "cluster": {"server": self.server, "insecure-skip-tls-verify": True},
                }
            ],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": user, "context": {"cluster": "gpucarve-local", "user": user}}],
            "current-context": user,
        }
        path = self.kubeconfig(user)
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)

    def _start_kwok(self) -> None:
        self._spawn(
            "kwok",
            [
                str(self.bin_dir / "kwok"),
                f"--kubeconfig={self.kubeconfig(ADMIN_USER)}",
                f"--config={self._kwok_stages()}",
                "--manage-all-nodes=true",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
        )

    def _kwok_stages(self) -> Path:
        """kwok's stages as the test environment built them, but a Job's pod completes after
        the delay its `pod-complete.stage.kwok.x-k8s.io/delay` annotation gives: kwok's own
        stage adds a default jitter of up to 5 s that, shorter than the delay, wins over it
        (pods of Jobs completed in seconds); a jitter is then only the one the
        `…/jitter-delay` annotation asks for."""
        docs = list(yaml.safe_load_all((self.bin_dir / "kwok-stages.yaml").read_text()))
        for doc in docs:
            if isinstance(doc, dict) and (doc.get("metadata") or {}).get("name") == POD_COMPLETE:
                (doc.get("spec", {}).get("delay") or {}).pop("jitterDurationMilliseconds", None)
        out = self.workdir / "kwok-stages.yaml"
        out.write_text(yaml.safe_dump_all([d for d in docs if d is not None], sort_keys=False))
        return out

    def _gates(self) -> tuple[str, ...]:
        """The API server's feature gates, for the components that act on the same APIs."""
        return WORKLOAD_API_FLAGS[:1] if self._version_flags() else ()

    def _start_controllers(self) -> None:
        names = CONTROLLERS + (WORKLOAD_API_CONTROLLERS if self._version_flags() else ())
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig(ADMIN_USER)}",
                f"--controllers={','.join(names)}",
                "--leader-elect=false",
                "--secure-port=0",
                *self._gates(),
            ],
        )

    def _start_kube_scheduler(self) -> None:
        """kube-scheduler binds the pods gpucarve does not govern (CPU pods, other
        namespaces' GPU pods, DaemonSets' pods), as on a real cluster."""
        config = self.workdir / "kube-scheduler.yaml"
        config.write_text(KUBE_SCHEDULER_CONFIG.format(kubeconfig=self.kubeconfig(ADMIN_USER)))
        self._spawn(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--config={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                *self._gates(),
            ],
        )

    def _wire_webhook(self, policy: Path, port: int, ca: bytes) -> None:
        """The configurations the chart installs, pointed at gpucarve's webhook serving
        `policy` on `port`, and the namespaces the policy governs (its configurations select
        them by name)."""
        governed = webhook.governed_namespaces(policy)
        for ns in governed:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            self.post("/api/v1/namespaces", namespace)
        for plural, body in webhook.configurations(f"https://127.0.0.1:{port}", ca, governed):
            self.post(f"/apis/admissionregistration.k8s.io/v1/{plural}", body)

    def add_policy_nodes(self, policy: Policy, devices: bool = True) -> int:
        """The policy's nodes as its pools' device plugin and GPU Feature Discovery publish
        them, and (`devices`) for its DRA pools the DeviceClasses and the ResourceSlices
        NVIDIA's DRA driver would publish; returns how many nodes."""
        nodes = node_manifests(policy)
        for m in nodes:
            self.post("/api/v1/nodes", m)
        if devices:
            for m in device_classes(policy):
                self.post("/apis/resource.k8s.io/v1/deviceclasses", m)
            for m in slice_manifests(policy):
                self.post("/apis/resource.k8s.io/v1/resourceslices", m)
        return len(nodes)

    def post(self, path: str, body: Mapping[str, Any]) -> None:
        """Create an object as the administrator; one that exists already is left as it is."""
        request = urllib.request.Request(
            self.server + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {self.tokens[ADMIN_USER]}",
                "Content-Type": "application/json",
            },
        )
        try:
            urllib.request.urlopen(request, context=_insecure(), timeout=30).close()
        except urllib.error.HTTPError as err:
            if err.code != 409:  # already there
                raise StackError(f"POST {path}: {err.code} {err.read()[:300]!r}") from None

    def _wait_ready(self, timeout_s: float) -> None:
        ctx = _insecure()
        request = urllib.request.Request(
            self.server + "/readyz",
            headers={"Authorization": f"Bearer {self.tokens[ADMIN_USER]}"},
        )
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise StackError(f"{name} exited with {proc.returncode}: {self.log_tail(name)}")
            with (
                contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError),
                urllib.request.urlopen(request, context=ctx, timeout=2) as reply,
            ):
                if reply.status == 200:
                    return
                last = f"status {reply.status}"
            time.sleep(0.2)
        raise StackError(f"kube-apiserver not ready after {timeout_s:.0f} s ({last})")

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _insecure() -> ssl.SSLContext:
    """The local API server's own self-signed certificate, on loopback."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
