"""Dynamic MIG on Kubernetes: hand the engine's repartitions to the GPU Operator's MIG manager.

What the MIG manager does (docs/kubernetes.md, "Dynamic MIG", has the sources): when a node's
`nvidia.com/mig.config` label names another configuration it sets
`nvidia.com/mig.config.state=pending`, pauses the GPU operands of the whole node (device plugin,
GPU Feature Discovery, DCGM, through their `nvidia.com/gpu.deploy.*` labels), has mig-parted
apply the configuration, restores the operands and sets the state to `success` (or `failed`).
mig-parted skips a GPU whose profile counts already match and, on a GPU that differs, destroys
every GPU instance and creates the new ones: instances in use there would be destroyed or make
the change fail. User pods are never evicted by it.

So gpucarve's sequence, for a node some of whose GPUs a cycle repartitions:

1. only GPUs with no instance in use are changed (`mig.dynamic.granularity: gpu`); the
   scheduler checks again that no pod holds a slice of them;
2. the node's whole layout gets a named configuration in the mig-parted ConfigMap the MIG
   manager reads (`version: v1`, one entry per GPU index; GPUs that do not change keep their
   counts, so mig-parted leaves them alone);
3. the node is cordoned (unless it already was: an administrator's cordon is left as it is)
   and the change is recorded on the node (`gpucarve.io/mig-change`): nothing new is bound to
   it, by gpucarve or another scheduler, while its device plugin is paused; pods on the GPUs
   that do not change keep running;
4. after `propagation_s` (the MIG manager reads the ConfigMap through a mounted volume, which
   the kubelet refreshes with a delay) the label is switched to the new configuration;
5. `success`: the new layout is recorded (`gpucarve.io/mig-layout`, with the time of change of
   each changed GPU for the minimum interval), the record of the change removed and the node
   uncordoned if gpucarve cordoned it; `failed`, or no answer within `timeout_s`: the same
   clean-up, a Warning Event on the Node, and the old layout kept (if the GPUs are now
   different the inventory reports the mismatch and keeps the node out of placements). All the
   node's GPUs then wait the pool's minimum interval before the next try.

Every step is recorded on the Node, so a scheduler that restarts or takes over the lease picks
the change up where it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from gpucarve.config.yaml_source import parse_yaml
from gpucarve.core.policy import DeviceApi, Policy, Pool
from gpucarve.core.problems import InvalidInput
from gpucarve.core.vocabulary import MIG_CHANGE_ANNOTATION as CHANGE_ANNOTATION
from gpucarve.core.vocabulary import MIG_LAYOUT_ANNOTATION as LAYOUT_ANNOTATION
from gpucarve.engine.decisions import Repartition
from gpucarve.kube.api.client import ApiError, Client, rfc3339
from gpucarve.kube.api.events import post_event
from gpucarve.kube.view.nodes.mig_layout import (
    CONFIG_LABEL,
    STATE_LABEL,
    Change,
    NodeLayout,
    config_for,
    layout_annotation,
)
from gpucarve.render.migparted import mig_parted_config

log = logging.getLogger("gpucarve.mig")
CONFIG_KEY = "config.yaml"


@dataclass(frozen=True)
class HandoffConfig:
    namespace: str = "gpu-operator"
    config_map: str = "gpucarve-mig-parted-config"
    propagation_s: float = 60.0
    timeout_s: float = 900.0


class MigHandoff:
    def __init__(
        self,
        client: Client,
        policy: Policy,
        config: HandoffConfig,
        clock: Callable[[], datetime],
        on_outcome: Callable[[str, str], None] = lambda node, result: None,
    ) -> None:
        """`on_outcome(node, result)`: a change `started`, `succeeded` or `failed` (metrics)."""
        self.client = client
        self.policy = policy
        self.cfg = config
        self.clock = clock
        self.on_outcome = on_outcome
        self.pools = {p.name: p for p in policy.pools}
        self.unmanaged: set[str] = set()  # nodes reported as having no MIG manager

    # ------------------------------------------------------------------ starting
    def begin(
        self,
        nodes: Mapping[str, Mapping[str, Any]],
        node_pool: Mapping[str, str],
        current: Mapping[str, NodeLayout],
        in_flight: Mapping[str, Change],
        busy_gpus: set[str],
        repartitions: Sequence[Repartition],
    ) -> list[str]:
        """Start a change on each node the cycle repartitioned, except a node already
        changing, one no MIG manager reports on, or one where a GPU to change is in
        `busy_gpus` (held by a bound or assumed pod); the nodes started."""
        by_node: dict[str, list[Repartition]] = {}
        for r in repartitions:
            by_node.setdefault(r.node, []).append(r)
        started = []
        for name, reps in sorted(by_node.items()):
            node = nodes.get(name)
            pool = self.pools.get(node_pool.get(name, ""))
            if node is None or pool is None or name in in_flight or name not in current:
                continue
            if pool.devices is DeviceApi.DRA:
                if self._carve(node, current[name], reps):
                    started.append(name)
                continue
            if STATE_LABEL not in (node["metadata"].get("labels") or {}):
                # No MIG manager has ever reported on this node: a change would keep it
                # cordoned until the timeout for nothing.
                if name not in self.unmanaged:
                    self.unmanaged.add(name)
                    log.warning(
                        "dynamic MIG: %s has no %s label, so no MIG manager runs there; "
                        "its GPUs are not repartitioned (deploy the GPU Operator with its MIG "
                        "manager, or turn mig.dynamic off for pool %s)",
                        name,
                        STATE_LABEL,
                        pool.name,
                    )
                continue
            held = sorted(r.gpu_id for r in reps if r.gpu_id in busy_gpus)
            if held:
                # never reached with `granularity: gpu`; a pod bound meanwhile wins
                log.warning("dynamic MIG: %s not changed: pods hold %s", name, ", ".join(held))
                continue
            layouts = list(current[name].layouts)
            for r in reps:
                layouts[r.gpu] = tuple(sorted(r.layout))
            if self._start(node, pool, tuple(layouts), reps):
                started.append(name)
        return started

    def _carve(
        self, node: Mapping[str, Any], before: NodeLayout, reps: Sequence[Repartition]
    ) -> bool:
        """A DRA pool's GPUs take their new layouts at once: the driver publishes every
        partition the GPU can hold and creates one when a claim for it is prepared, so there
        is no configuration, cordon or wait, and the instances in use (which the engine keeps
        in place) are never touched. Only the layout is recorded on the node, where the next
        cycle's inventory (and a restarted scheduler) reads it."""
        name = node["metadata"]["name"]
        layouts = list(before.layouts)
        changed = dict(before.changed_at)
        now = rfc3339(self.clock())
        for r in reps:
            layouts[r.gpu] = tuple(sorted(r.layout))
            changed[r.gpu] = now
        done = NodeLayout(tuple(layouts), None, changed)
        patch = {"metadata": {"annotations": {LAYOUT_ANNOTATION: layout_annotation(done)}}}
        if not self._try_patch(node, patch):
            return False
        reason = "; ".join(f"gpu{r.gpu}: {r.reason}" for r in sorted(reps, key=lambda r: r.gpu))
        log.info("dynamic MIG (DRA): %s carved (%s)", name, reason)
        self.on_outcome(name, "succeeded")
        self._event(node, "Normal", "MIGReconfigured", f"partitions carved: {reason}")
        return True

    def _start(
        self,
        node: Mapping[str, Any],
        pool: Pool,
        layouts: tuple[tuple[Any, ...], ...],
        reps: Sequence[Repartition],
    ) -> bool:
        name = node["metadata"]["name"]
        config, entries = config_for(pool, layouts)
        try:
            self._publish({config: entries})
        except ApiError as err:
            log.warning("dynamic MIG: configuration %s not written: %s", config, err)
            return False
        cordoned_already = bool((node.get("spec") or {}).get("unschedulable"))
        change = Change(
            config,
            layouts,
            tuple(sorted(r.gpu for r in reps)),
            rfc3339(self.clock()),
            not cordoned_already,
            "; ".join(f"gpu{r.gpu}: {r.reason}" for r in sorted(reps, key=lambda r: r.gpu)),
        )
        patch: dict[str, Any] = {"metadata": {"annotations": {CHANGE_ANNOTATION: change.to_json()}}}
        if change.cordoned:
            patch["spec"] = {"unschedulable": True}
        if self.cfg.propagation_s <= 0:
            patch["metadata"]["labels"] = _switch(config)
        try:
            self._patch_node(node, patch)
        except ApiError as err:
            log.warning("dynamic MIG: node %s not marked for its change: %s", name, err)
            return False
        log.info("dynamic MIG: %s -> %s (%s)", name, config, change.reason)
        self.on_outcome(name, "started")
        return True

    def publish_static(self) -> int:
        """The policy's static configurations (`gpucarve render mig-config`: gpucarve-<pool>)
        into the MIG manager's ConfigMap, beside dynamic MIG's: a GPU Operator pointed at
        it (`gpucarve render gpu-operator`) then carves static pools from the same file.
        Returns how many configurations the policy has."""
        configs = mig_parted_config(self.policy)["mig-configs"]
        if configs:
            self._publish(configs)
        return len(configs)

    def _publish(self, configs: Mapping[str, list[dict[str, Any]]]) -> None:
        """Add configurations to the MIG manager's ConfigMap (optimistic concurrency: a
        concurrent writer makes this cycle's attempt fail, the next one retries)."""
        path = f"/api/v1/namespaces/{self.cfg.namespace}/configmaps/{self.cfg.config_map}"
        try:
            cm = self.client.get(path)
        except ApiError as err:
            if err.status != 404:
                raise
            cm = None
        doc: dict[str, Any] = {"version": "v1", "mig-configs": {}}
        if cm is not None:
            raw = (cm.get("data") or {}).get(CONFIG_KEY)
            if raw:
                try:
                    loaded = parse_yaml(raw, path).data
                except InvalidInput as exc:
                    log.warning("%s: unreadable, rewritten: %s", path, exc.problems[0].message)
                    loaded = None
                if isinstance(loaded, dict):
                    doc = loaded
            have = doc.get("mig-configs") or {}
            if all(have.get(name) == entries for name, entries in configs.items()):
                return
        doc.setdefault("mig-configs", {}).update(configs)
        meta: dict[str, str] = {"name": self.cfg.config_map, "namespace": self.cfg.namespace}
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {CONFIG_KEY: yaml.safe_dump(doc, sort_keys=True)},
        }
        if cm is None:
            self.client.call("POST", f"/api/v1/namespaces/{self.cfg.namespace}/configmaps", body)
        else:
            meta["resourceVersion"] = cm["metadata"]["resourceVersion"]
            self.client.call("PUT", path, body)

    # ------------------------------------------------------------------ following
    def advance(
        self,
        nodes: Mapping[str, Mapping[str, Any]],
        current: Mapping[str, NodeLayout],
        in_flight: Mapping[str, Change],
    ) -> None:
        """Move each change in flight on: switch the label once the configuration has had
        time to reach the MIG manager, finish on success, clean up on failure or timeout."""
        now = self.clock()
        for name, change in sorted(in_flight.items()):
            node = nodes.get(name)
            if node is None:
                continue
            labels = node["metadata"].get("labels") or {}
            age = (now - datetime.fromisoformat(change.started)).total_seconds()
            if labels.get(CONFIG_LABEL) != change.config:
                if age >= self.cfg.propagation_s:
                    self._try_patch(node, {"metadata": {"labels": _switch(change.config)}})
                continue
            state = labels.get(STATE_LABEL)
            before = current.get(name)
            if state == "success":
                self._finish(node, change, before, None)
            elif state == "failed":
                self._finish(node, change, before, "the MIG manager reported failed")
            elif age >= self.cfg.timeout_s:
                why = f"no success within {self.cfg.timeout_s:.0f} s (state {state})"
                self._finish(node, change, before, why)

    def _finish(
        self,
        node: Mapping[str, Any],
        change: Change,
        before: NodeLayout | None,
        failure: str | None,
    ) -> None:
        name = node["metadata"]["name"]
        changed = dict(before.changed_at) if before is not None else {}
        # A failure may be the node's (its MIG manager, its driver), not the GPU's: then every
        # GPU of the node waits the minimum interval before the next try.
        for g in change.gpus if failure is None else range(len(change.layouts)):
            changed[g] = change.started
        if failure is None:
            done = NodeLayout(change.layouts, change.config, changed)
        elif before is not None:
            done = NodeLayout(before.layouts, before.config, changed)
        else:
            done = None
        annotations: dict[str, Any] = {CHANGE_ANNOTATION: None}
        if done is not None:
            annotations[LAYOUT_ANNOTATION] = layout_annotation(done)
        patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if change.cordoned:
            patch["spec"] = {"unschedulable": None}
        if not self._try_patch(node, patch):
            return
        self.on_outcome(name, "succeeded" if failure is None else "failed")
        if failure is None:
            log.info("dynamic MIG: %s now runs %s", name, change.config)
            self._event(node, "Normal", "MIGReconfigured", f"{change.config}: {change.reason}")
        else:
            log.warning("dynamic MIG: %s: %s %s", name, change.config, failure)
            self._event(
                node,
                "Warning",
                "MIGReconfigureFailed",
                f"{change.config}: {failure}; the node keeps its previous layout record and "
                "its GPUs wait the pool's minimum interval before another try",
            )

    # ------------------------------------------------------------------ writes
    def _patch_node(self, node: Mapping[str, Any], patch: dict[str, Any]) -> None:
        """A merge patch that applies only to the node as the informer showed it (409
        otherwise): a stale cache never repeats a step the node has moved past."""
        meta = node["metadata"]
        body = {
            **patch,
            "metadata": {**patch.get("metadata", {}), "resourceVersion": meta["resourceVersion"]},
        }
        self.client.call(
            "PATCH", f"/api/v1/nodes/{meta['name']}", body, "application/merge-patch+json"
        )

    def _try_patch(self, node: Mapping[str, Any], patch: dict[str, Any]) -> bool:
        try:
            self._patch_node(node, patch)
        except ApiError as err:
            log.warning("dynamic MIG: node %s not updated: %s", node["metadata"]["name"], err)
            return False
        return True

    def _event(self, node: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        name = node["metadata"]["name"]
        involved = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": name}
        post_event(self.client, involved, kind, reason, message, self.clock())


def _switch(config: str) -> dict[str, str | None]:
    # The state label goes with the switch: a `success` left from the previous configuration
    # must not read as this one's.
    return {CONFIG_LABEL: config, STATE_LABEL: None}
