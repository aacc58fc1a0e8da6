"""A wake whose pod changes only show this scheduler's own bindings, as it assumed them, runs
no cycle (`loop.confirms`): anything else about a pod does."""

from __future__ import annotations

from typing import Any

from gpucarve.kube.scheduler.loop import confirms
from gpucarve.kube.view.pods.assigned import Assigned
from tests.unit.kube.view.test_cluster_view import pod

GPU1 = {"nvidia.com/gpu": "1"}
ASSUMED = {
    "research/a": Assigned("training-1", ("training-1/gpu0",), gpus=(0,)),
    "research/b": Assigned("training-1", ("training-1/gpu1",), gpus=(1,)),
}


def bound(name: str, node: str, slices: list[str]) -> dict[str, Any]:
    return pod(name, "research", GPU1, node, slices)


def test_bindings_seen_as_assumed_are_confirmations() -> None:
    changes = {
        "research/a": bound("a", "training-1", ["training-1/gpu0"]),
        "research/b": bound("b", "training-1", ["training-1/gpu1"]),
    }
    assert confirms(changes, ASSUMED)


def test_anything_else_is_not() -> None:
    a = bound("a", "training-1", ["training-1/gpu0"])
    others: list[dict[str, dict[str, Any] | None] | None] = [
        None,  # the informer's log does not reach back
        {},  # a wake with no change
        {"research/a": a, "research/new": pod("new", "research", GPU1)},  # a new pod
        {"research/a": None},  # deleted
        {"research/a": pod("a", "research", GPU1)},  # still pending (not bound yet)
        {"research/a": bound("a", "training-2", ["training-2/gpu0"])},  # bound elsewhere
        {"research/a": bound("a", "training-1", ["training-1/gpu5"])},  # other slices
        {"research/c": bound("c", "training-1", ["training-1/gpu2"])},  # never assumed
    ]
    for changes in others:
        assert not confirms(changes, ASSUMED), changes
