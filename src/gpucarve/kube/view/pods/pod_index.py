"""The live pods sorted the way the view reads them, kept between cycles.

The view needs the pods in four heaps: gpucarve's bound pods by gang (those it bound and the
watch has not shown yet, `assumed`, among them), gpucarve's pending pods, pods another scheduler
bound, and per gang how many of gpucarve's pods completed. Sorting every pod into them each
cycle cost a pass over every pod (at 6,000 bound pods, a sixth of the view). The index keeps the
heaps and moves only the pods the informer says changed since the generation it last read
(`Informer.changes_since`), and those whose assumed binding came or went; it remembers which
gangs of bound pods changed, so the bound half of the view looks at those only
(`bound_view.claim_bound`). Fed every object at once (`sync_all`), it compares them with what it
holds by identity: the informer replaces an object on every change and never edits one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpucarve.core.vocabulary import FRACTION_ANNOTATION, MEMORY_ANNOTATION, TERMINAL_PHASES
from gpucarve.kube.view.pods.assigned import Assigned
from gpucarve.kube.view.pods.pod_facts import PodFacts, PodFactsMemo, gpu_requests

GroupKey = tuple[str, str]
Bound = tuple[Mapping[str, Any], Assigned | None]
# how an assumed pod's bound object is made (`BoundGroups.assumed_pod`)
Assume = Callable[[Mapping[str, Any], Assigned], Mapping[str, Any]]

# where a pod is kept: gpucarve's bound, gpucarve's pending, bound by another scheduler (with
# GPUs or claims, or without), completed (counted per gang), or nowhere
BOUND, PENDING, FOREIGN, PLAIN, DONE, NONE = range(6)


def asks_gpus(pod: Mapping[str, Any]) -> bool:
    """The pod asks for GPUs: device-plugin limits, ResourceClaims, or a gpucarve fraction."""
    annotations = pod["metadata"].get("annotations") or {}
    return bool(
        gpu_requests(pod)
        or (pod.get("spec") or {}).get("resourceClaims")
        or any(k in annotations for k in (FRACTION_ANNOTATION, MEMORY_ANNOTATION))
    )


def _key(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


class PodIndex:
    def __init__(
        self,
        scheduler_name: str,
        facts: PodFactsMemo,
        governed: frozenset[str] | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.facts = facts
        # the namespaces a queue lists (None: every one). Elsewhere no webhook guards the
        # assignment annotation: a pod there that asks for no GPU holds nothing by one (a pod
        # that does, gpucarve's own bound before a policy change dropped its namespace, keeps
        # what its assignment names: `orphans`)
        self.governed = governed
        self.generation = -1  # the informer's generation last read (-1: none)
        self._pods: dict[str, Mapping[str, Any]] = {}
        self._where: dict[str, tuple[int, GroupKey]] = {}
        self._assumed: dict[str, Assigned] = {}
        self.bound: dict[GroupKey, dict[str, Bound]] = {}
        self.pending: dict[str, Mapping[str, Any]] = {}
        self.foreign: dict[str, Mapping[str, Any]] = {}  # with GPU limits or ResourceClaims
        self.plain: dict[str, Mapping[str, Any]] = {}  # neither: they hold no GPU by request
        self.done: Counter[GroupKey] = Counter()
        self.hints: dict[GroupKey, dict[str, int]] = {}  # gang -> pod -> the size it names
        # gangs whose bound pods changed since `take_changed`
        self._changed: set[GroupKey] = set()
        self.moved = 0  # pods placed anew in the last sync (for tests and profiles)

    # ------------------------------------------------------------------ feeding
    def sync_all(
        self,
        pods: Iterable[Mapping[str, Any]],
        assumed: Mapping[str, Assigned],
        assume: Assume | None = None,
        generation: int = -1,
    ) -> None:
        """Every live object: those not held as they are (by identity) move."""
        now = {_key(p): p for p in pods}
        changed: dict[str, Mapping[str, Any] | None] = {
            k: p for k, p in now.items() if self._pods.get(k) is not p
        }
        changed.update((k, None) for k in self._pods if k not in now)
        self.sync(changed, assumed, assume, generation)

    def sync(
        self,
        changed: Mapping[str, Mapping[str, Any] | None],
        assumed: Mapping[str, Assigned],
        assume: Assume | None = None,
        generation: int = -1,
    ) -> None:
        """The objects changed by key (None: gone), and the bindings assumed now. `assume`:
        what makes an assumed pod's bound object (`BoundGroups.assumed_pod`); without it, a
        copy with its node set."""
        keys = set(changed)
        keys.update(k for k, a in assumed.items() if self._assumed.get(k) is not a)
        keys.update(k for k in self._assumed if k not in assumed)
        self._assumed = dict(assumed)
        for k in keys:
            pod = changed[k] if k in changed else self._pods.get(k)
            self._take_out(k)
            if pod is not None:
                self._pods[k] = pod
                self._put(k, pod, assume)
        self.moved = len(keys)
        self.generation = generation

    def _take_out(self, k: str) -> None:
        self._pods.pop(k, None)
        where, group = self._where.pop(k, (NONE, ("", "")))
        hinted = self.hints.get(group)
        if hinted is not None and hinted.pop(k, None) is not None and not hinted:
            del self.hints[group]
        if where == BOUND:
            members = self.bound[group]
            del members[k]
            if not members:
                del self.bound[group]
            self._changed.add(group)
        elif where == PENDING:
            del self.pending[k]
        elif where == FOREIGN:
            del self.foreign[k]
        elif where == PLAIN:
            del self.plain[k]
        elif where == DONE:
            self.done[group] -= 1
            if not self.done[group]:
                del self.done[group]

    def _put(self, k: str, pod: Mapping[str, Any], assume: Assume | None) -> None:
        f = self.facts.of(pod)
        if f.hint is not None:
            self.hints.setdefault(f.group, {})[k] = f.hint
        where = self._sort(k, pod, f, assume)
        self._where[k] = (where, f.group)

    def _sort(self, k: str, pod: Mapping[str, Any], f: PodFacts, assume: Assume | None) -> int:
        """As the view has always sorted a pod; the heap it went to."""
        spec = pod.get("spec") or {}
        mine = spec.get("schedulerName") == self.scheduler_name and (
            self.governed is None or pod["metadata"]["namespace"] in self.governed or asks_gpus(pod)
        )
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            if mine and phase == "Succeeded":
                self.done[f.group] += 1
                return DONE
            return NONE
        if spec.get("nodeName"):
            if mine:
                return self._bind(k, f.group, (pod, f.assigned))
            if gpu_requests(pod) or spec.get("resourceClaims"):
                self.foreign[k] = pod
                return FOREIGN
            self.plain[k] = pod
            return PLAIN
        a = self._assumed.get(k)
        if a is not None:
            shown = (
                assume(pod, a)
                if assume is not None
                else {**pod, "spec": {**spec, "nodeName": a.node}}
            )
            return self._bind(k, f.group, (shown, a))
        if mine and not pod["metadata"].get("deletionTimestamp"):
            self.pending[k] = pod
            return PENDING
        return NONE

    def _bind(self, k: str, group: GroupKey, entry: Bound) -> int:
        self.bound.setdefault(group, {})[k] = entry
        self._changed.add(group)
        return BOUND

    # ------------------------------------------------------------------ reading
    def take_changed(self) -> set[GroupKey]:
        """The gangs whose bound pods changed since the last call."""
        out, self._changed = self._changed, set()
        return out

    def sorted_bound(self) -> list[Bound]:
        """gpucarve's bound pods, in key order."""
        every = [(k, e) for members in self.bound.values() for k, e in members.items()]
        return [e for _, e in sorted(every, key=lambda x: x[0])]

    def sorted_pending(self) -> list[Mapping[str, Any]]:
        return [self.pending[k] for k in sorted(self.pending)]

    def sorted_foreign(self, also: Iterable[str]) -> list[Mapping[str, Any]]:
        """Pods another scheduler bound that may hold GPUs: those with GPU limits or claims,
        and of the others those named in `also` (devices the kubelet reports they got)."""
        keys = set(self.foreign)
        keys.update(k for k in also if k in self.plain)
        return [self.foreign.get(k) or self.plain[k] for k in sorted(keys)]

    def hint_of(self, group: GroupKey) -> int | None:
        """The gang size its pods' labels give: the first pod's in key order."""
        hinted = self.hints.get(group)
        return None if not hinted else hinted[min(hinted)]
