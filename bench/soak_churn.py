"""The churn of `bench/soak.py`: pods arriving, running, finishing and given up; nodes cordoned,
uncordoned, added and drained away. One seeded generator draws every choice."""

from __future__ import annotations

import argparse
import copy
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tests.integration.kube_pods import pod

from gpucarve.kube.api.client import ApiError, Client

NAMESPACES = ("alpha", "beta")
GANG_SHARE = 1 / 8  # of arrivals: a gang of four two-GPU pods
GANG_SIZE = 4
GIVE_UP_S = 120.0
NODE_EVENT_S = 20.0
DRAIN_AFTER_S = 5.0
MERGE = "application/merge-patch+json"


@dataclass
class Tracked:
    ns: str
    group: str | None
    created_t: float
    lifetime_s: float
    bound_t: float | None = None


class Churn:
    namespaces = NAMESPACES

    def __init__(
        self,
        client: Client,
        rng: random.Random,
        manifests: list[dict[str, Any]],
        active: int,
        args: argparse.Namespace,
    ) -> None:
        self.client = client
        self.rng = rng
        self.by_name = {m["metadata"]["name"]: m for m in manifests}
        names = sorted(self.by_name)
        self.active = names[:active]
        self.reserve = names[active:]
        self.cordoned: set[str] = set()
        self.draining: dict[str, float] = {}  # node -> when cordoned for removal
        self.rate = args.rate
        self.lifetime_s = args.lifetime_s
        self.pods: dict[str, Tracked] = {}
        self.seq = 0
        self.created = self.deleted = self.added = self.removed = self.policy_edits = 0
        self.next_node_event = NODE_EVENT_S
        self.pool = ThreadPoolExecutor(8)

    @property
    def alive(self) -> set[str]:
        return set(self.pods)

    def totals(self) -> dict[str, int]:
        return {
            "created": self.created,
            "deleted": self.deleted,
            "nodes": len(self.active),
            "cordoned": len(self.cordoned),
            "added": self.added,
            "removed": self.removed,
            "policy_edits": self.policy_edits,
        }

    def setup(self) -> None:
        for ns in NAMESPACES:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            self.client.call("POST", "/api/v1/namespaces", body)
        list(self.pool.map(self._create_node, self.active))

    def list_pods(self, ns: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.client.get(f"/api/v1/namespaces/{ns}/pods")["items"]
        return items

    # ------------------------------------------------------------------ one second
    def tick(self, t: float) -> None:
        nodes_of: dict[str, str] = {}
        for ns in NAMESPACES:
            for p in self.list_pods(ns):
                name, node = p["metadata"]["name"], (p.get("spec") or {}).get("nodeName")
                tracked = self.pods.get(name)
                if node and tracked is not None:
                    nodes_of[name] = node
                    if tracked.bound_t is None:
                        tracked.bound_t = t
        done = {
            n for n, p in self.pods.items()
            if (p.bound_t is not None and t - p.bound_t >= p.lifetime_s)
            or (p.bound_t is None and t - p.created_t >= GIVE_UP_S)
        }  # fmt: skip
        self._delete(self._with_gangs(done))
        self._drain(nodes_of, t)
        self._arrive(t)
        if t >= self.next_node_event:
            self.next_node_event += NODE_EVENT_S
            self._node_event(t)

    def _with_gangs(self, names: set[str]) -> set[str]:
        """A gang goes as a whole (finished, given up or drained), never member by member."""
        groups = {self.pods[n].group for n in names if self.pods[n].group}
        return names | {n for n, p in self.pods.items() if p.group in groups}

    def _arrive(self, t: float) -> None:
        # binomial arrivals, mean `rate`: bursty like real submissions, bounded per tick
        count = sum(self.rng.random() < 0.5 for _ in range(round(self.rate * 2)))
        manifests = []
        for _ in range(count):
            self.seq += 1
            ns = self.rng.choice(NAMESPACES)
            lifetime = self.rng.expovariate(1 / self.lifetime_s)
            if self.rng.random() < GANG_SHARE:
                group = f"g{self.seq:06d}"
                members = [f"{group}-{i}" for i in range(GANG_SIZE)]
                manifests += [pod(ns, m, "nvidia.com/gpu", 2, group=group) for m in members]
                for m in members:
                    self.pods[m] = Tracked(ns, group, t, lifetime)
            else:
                name = f"p{self.seq:06d}"
                manifests.append(pod(ns, name, "nvidia.com/gpu"))
                self.pods[name] = Tracked(ns, None, t, lifetime)
        list(self.pool.map(self._create_pod, manifests))
        self.created += len(manifests)

    def _create_pod(self, manifest: dict[str, Any]) -> None:
        ns = manifest["metadata"]["namespace"]
        self.client.call("POST", f"/api/v1/namespaces/{ns}/pods", manifest)

    def _delete(self, names: set[str]) -> None:
        def one(name: str) -> None:
            ns = self.pods[name].ns
            try:
                self.client.call(
                    "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0"
                )
            except ApiError as err:
                if err.status != 404:
                    raise

        list(self.pool.map(one, sorted(names)))
        for name in names:
            del self.pods[name]
        self.deleted += len(names)

    # ------------------------------------------------------------------ nodes
    def _create_node(self, name: str) -> None:
        manifest = copy.deepcopy(self.by_name[name])
        manifest["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Soak"}]
        self.client.call("POST", "/api/v1/nodes", manifest)

    def _cordon(self, name: str, on: bool) -> None:
        patch = {"spec": {"unschedulable": on or None}}
        self.client.call("PATCH", f"/api/v1/nodes/{name}", patch, MERGE)
        (self.cordoned.add if on else self.cordoned.discard)(name)

    def _node_event(self, t: float) -> None:
        kind = self.rng.choice(("cordon", "uncordon", "add", "remove"))
        if kind == "cordon" and (free := sorted(set(self.active) - self.cordoned)):
            self._cordon(self.rng.choice(free), True)
        elif kind == "uncordon" and self.cordoned:
            self._cordon(self.rng.choice(sorted(self.cordoned)), False)
        elif kind == "add" and self.reserve:
            name = self.reserve.pop(0)
            self._create_node(name)
            self.active.append(name)
            self.added += 1
        elif kind == "remove" and len(self.active) - len(self.draining) > 1:
            # cordoned first, drained a few seconds later: a binding the scheduler had in
            # flight before it saw the cordon lands first, and goes with the drain
            name = self.rng.choice(sorted(set(self.active) - set(self.draining)))
            if name not in self.cordoned:
                self._cordon(name, True)
            self.draining[name] = t

    def _drain(self, nodes_of: dict[str, str], t: float) -> None:
        for name in sorted(n for n, since in self.draining.items() if t - since >= DRAIN_AFTER_S):
            # its pods go as a failed job's do, and with them the rest of their gangs
            on_it = {p for p, n in nodes_of.items() if n == name and p in self.pods}
            self._delete(self._with_gangs(on_it))
            self.client.call("DELETE", f"/api/v1/nodes/{name}")
            self.active.remove(name)
            self.cordoned.discard(name)
            self.reserve.append(name)
            self.removed += 1
            del self.draining[name]
