"""Which slices the cluster's bound pods hold, as the view rebuilds it each cycle: each pod's
annotated slices (`gpucarve.io/assignment`), the devices the kubelet reports it got (those
first: the real device wins, `kube/view/nodes/device_truth.py`), or for a pod bound by
another scheduler the first free slices of the resources it requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucarve.core.cluster import Allocation
from gpucarve.core.policy import Policy, SliceKind
from gpucarve.kube.view.nodes.device_truth import resolve
from gpucarve.kube.view.nodes.inventory import Inventory
from gpucarve.kube.view.pods.assigned import Assigned
from gpucarve.kube.view.pods.pod_facts import gpu_requests


class SliceClaims:
    """The slices the view's pods hold, claimed one pod at a time."""

    def __init__(self, inventory: Inventory, policy: Policy) -> None:
        self.inv = inventory
        self.policy = policy
        self.cluster = inventory.cluster
        self.allocs: dict[str, Allocation] = {}
        self.promised: dict[str, int] = {}  # GPU id -> MiB promised on shared GPUs
        self.warnings: list[str] = []
        # claims written over a slice already claimed (the same owner's, from the kubelet's
        # report): a view's layers (`view_step.Layers`) hold only while there are none
        self.rewritten = 0

    def reset(self) -> None:
        """Forget every claim, to claim again from scratch."""
        self.allocs.clear()
        self.promised.clear()
        self.warnings.clear()

    def claim(self, owner: str, a: Assigned) -> bool:
        """Allocate the pod's slices; False (and a warning) if any is unknown or taken."""
        for sid in a.slices:
            s = self.cluster.slices.get(sid)
            if s is None or s.node != a.node:
                self.warnings.append(f"{owner} claims {sid}, not a slice of node {a.node}")
                return False
            if sid in self.allocs:
                held = self.allocs[sid].owner
                if held == owner:
                    continue  # claimed already, from the kubelet's report
                self.warnings.append(f"{owner} and {held} both claim {sid}")
                return False
        for sid in a.slices:
            s = self.cluster.slices[sid]
            mem = s.memory_mib
            if s.kind in (SliceKind.TIME_SLICE, SliceKind.MPS) and a.shared_memory_mib:
                mem = a.shared_memory_mib // len(a.slices)
            if sid in self.allocs:
                self.rewritten += 1
            self.allocs[sid] = Allocation(sid, owner, s.compute_milli, mem)
        return True

    def fallback(self, owner: str, pod: Mapping[str, Any]) -> Assigned | None:
        """First free slices on the pod's node for each GPU resource it requests."""
        node_name = pod["spec"]["nodeName"]
        try:
            node = self.cluster.node(node_name)
        except KeyError:
            return None
        wanted = gpu_requests(pod)
        if not wanted:
            return Assigned(node_name, ())
        chosen: list[str] = []
        for resource, n in sorted(wanted.items()):
            free = [
                sid
                for gpu in node.gpus
                for sid in gpu.slice_ids
                if sid not in self.allocs
                and sid not in chosen
                and self.inv.resource_of[self.cluster.slices[sid].flavor] == resource
            ]
            if len(free) < n:
                self.warnings.append(
                    f"{owner} on {node_name} uses {n} {resource}, only {len(free)} left free"
                )
            chosen += free[:n]
        a = Assigned(node_name, tuple(chosen))
        return a if self.claim(owner, a) else None

    def claim_reported(self, key: str, pod: Mapping[str, Any], owner: str) -> Assigned | None:
        """Claim for `owner` the devices a pod bound by another scheduler really got (the
        node agent's report, or its allocated ResourceClaims); None if none are known."""
        node = str(pod["spec"]["nodeName"])
        report = self.inv.reported.get(key)
        if report is None or report[0] != node:
            return None
        sids = resolve(self.cluster, node, report[1], ())
        if sids is None:
            units = ", ".join(report[1])
            self.warnings.append(f"{key}: its devices ({units}) are no slices of {node}")
            return None
        a = Assigned(node, sids)
        return a if self.claim(owner, a) else None

    def hold_claimed(self, by_claim: Mapping[str, tuple[str, tuple[str, ...]]]) -> None:
        """Hold the devices of allocated ResourceClaims that no pod holds (a claim whose pod
        is not bound yet, or is gone while kube-controller-manager deallocates it)."""
        for claim, (node, units) in sorted(by_claim.items()):
            sids = resolve(self.cluster, node, units, ())
            if sids is None:
                continue
            for sid in sids:
                if sid not in self.allocs:
                    s = self.cluster.slices[sid]
                    owner = f"claim:{claim}"
                    self.allocs[sid] = Allocation(sid, owner, s.compute_milli, s.memory_mib)

    def reported_first(
        self, bound: list[tuple[Mapping[str, Any], Assigned | None]]
    ) -> tuple[list[tuple[Mapping[str, Any], Assigned | None]], dict[str, str]]:
        """Claim the devices each pod really got (the node agent's report) before any
        assumed slice: the pods with their assignments as the kubelet has them, and per pod
        whose assignment said otherwise, the disagreement in words."""
        moves: dict[str, str] = {}
        out: list[tuple[Mapping[str, Any], Assigned | None]] = []
        for pod, a in bound:
            meta = pod["metadata"]
            k = f"{meta['namespace']}/{meta['name']}"
            node = str(pod["spec"]["nodeName"])
            report = self.inv.reported.get(k)
            if report is None or report[0] != node:
                out.append((pod, a))
                continue
            sids = resolve(self.cluster, node, report[1], a.slices if a else ())
            if sids is None:
                units = ", ".join(report[1])
                self.warnings.append(
                    f"{k}: the kubelet's devices ({units}) are no slices of {node}"
                )
                out.append((pod, a))
                continue
            real = Assigned(node, sids, a.shared_memory_mib if a else 0)
            if a is not None and tuple(sorted(a.slices)) != sids:
                moves[k] = (
                    f"gpucarve placed it on {', '.join(a.slices)} but the kubelet gave it "
                    f"{', '.join(sids)}; gpucarve follows the kubelet"
                )
            out.append((pod, real if self.claim(k, real) else a))
        return out, moves
