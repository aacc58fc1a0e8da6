"""A stand-in for the GPU Operator's MIG manager that plays its label protocol on the real API
server (there are no GPUs here): when a node's `nvidia.com/mig.config` names a configuration
whose state is not settled it sets `nvidia.com/mig.config.state=pending`, pauses the device
plugin through its deploy label, reads the configuration from the mig-parted ConfigMap, and
then publishes the new `nvidia.com/mig-*` resources and `success` — or `failed` when the
configuration is missing, when told to fail, or when a GPU whose profile counts change has a
pod on it (mig-parted recreates every instance of such a GPU, and `nvidia-smi mig` refuses to
destroy instances in use). It records what it saw when it acted, for the tests to check.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.integration.api import Api

CONFIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"
DEPLOY = "nvidia.com/gpu.deploy.device-plugin"


@dataclass
class Applied:
    node: str
    config: str
    state: str
    cordoned: bool  # spec.unschedulable when it started
    pods_on_node: list[str]
    changed_gpus: list[int]


@dataclass
class MigManagerStandIn:
    api: Api
    namespace: str
    config_map: str
    # per node, per GPU index: profile counts, as the GPUs are now
    gpus: dict[str, list[dict[str, int]]]
    fail: bool = False
    applied: list[Applied] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> threading.Thread:
        # As the real one does for each node it manages: report its configuration applied
        # (a node with a state already is in the middle of something: left as it is).
        for name in self.gpus:
            labels = self.api.get(f"/api/v1/nodes/{name}")["metadata"].get("labels") or {}
            if STATE not in labels and CONFIG not in labels:
                self.set_labels(name, {STATE: "success"})
        thread = self._thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stop, and wait until no call of the loop's is in flight: the stack may shut down
        right after (a call then meets a 503 and fails the thread)."""
        self.stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            for node in self.api.get("/api/v1/nodes")["items"]:
                labels = node["metadata"].get("labels") or {}
                want = labels.get(CONFIG)
                if want is not None and labels.get(STATE) not in ("success", "failed"):
                    self._apply(node, want)

    def set_labels(self, name: str, labels: dict[str, str | None]) -> None:
        status, reply = self.api.call(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"metadata": {"labels": labels}},
            "application/merge-patch+json",
        )
        assert status == 200, reply

    def _apply(self, node: dict[str, Any], want: str) -> None:
        name = node["metadata"]["name"]
        self.set_labels(name, {STATE: "pending", DEPLOY: "paused-for-mig-change"})
        entries = self._config(want)
        now = self.gpus.setdefault(name, [])
        new = [dict(c) for c in now]
        if entries is not None:
            for entry in entries:
                devices = entry["devices"]
                for g in range(len(now)) if devices == "all" else devices:
                    new[g] = dict(entry.get("mig-devices") or {})
        changed = [g for g in range(len(now)) if new[g] != now[g]]
        pods = self._pods_on(name)
        held = {g for p in pods.values() for g in p}
        state = "success"
        if self.fail or entries is None or held & set(changed):
            state = "failed"
        self.applied.append(
            Applied(
                name,
                want,
                state,
                bool((node.get("spec") or {}).get("unschedulable")),
                sorted(pods),
                changed,
            )
        )
        if state == "success":
            self.gpus[name] = new
            self._publish(name, now, new)
        self.set_labels(name, {STATE: state, DEPLOY: "true"})

    def _config(self, want: str) -> list[dict[str, Any]] | None:
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{self.config_map}"
        status, cm = self.api.call("GET", path)
        if status != 200:
            return None
        doc = yaml.safe_load((cm.get("data") or {}).get("config.yaml") or "{}")
        found = (doc.get("mig-configs") or {}).get(want)
        return list(found) if found else None

    def _pods_on(self, node: str) -> dict[str, set[int]]:
        """Pods bound to the node, with the GPU indices they really use: the devices the
        node agent reports the kubelet gave them where it does (what the real tools see),
        else the GPUs their gpucarve assignment names."""
        real_raw = ((self.api.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {})
                    .get("gpucarve.io/pod-devices"))  # fmt: skip
        real = json.loads(real_raw) if real_raw else {}
        out: dict[str, set[int]] = {}
        for p in self.api.get(f"/api/v1/pods?fieldSelector=spec.nodeName={node}")["items"]:
            k = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            if k in real:
                out[k] = {int(u.split("/")[0].removeprefix("gpu")) for u in real[k]}
                continue
            raw = (p["metadata"].get("annotations") or {}).get("gpucarve.io/assignment")
            slices = json.loads(raw)["slices"] if raw else []
            out[k] = {int(s.split("/")[1].removeprefix("gpu")) for s in slices}
        return out

    def _publish(self, name: str, old: list[dict[str, int]], new: list[dict[str, int]]) -> None:
        before: Counter[str] = Counter()
        after: Counter[str] = Counter()
        for c in old:
            before.update(c)
        for c in new:
            after.update(c)
        resources: dict[str, str | None] = {
            f"nvidia.com/mig-{p}": None for p in before if p not in after
        }
        resources.update({f"nvidia.com/mig-{p}": str(n) for p, n in after.items()})
        status, reply = self.api.call(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"capacity": resources, "allocatable": resources}},
            "application/merge-patch+json",
        )
        assert status == 200, reply
