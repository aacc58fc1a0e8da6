"""A history rebuilt from kube-state-metrics' series as Prometheus answers them: resource names
given back, a Job's pods one workload, a pod deleted before it ended, what cannot be read
counted by why."""

from __future__ import annotations

import pytest

from gpucarve.sim.history.prometheus import Series, rebuild, resource_name

NOW = 1_796_000_000


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("nvidia_com_gpu", "nvidia.com/gpu"),
        ("nvidia_com_gpu_shared", "nvidia.com/gpu.shared"),
        ("nvidia_com_mig_1g_10gb", "nvidia.com/mig-1g.10gb"),
        ("nvidia_com_mig_1g_10gb_me", "nvidia.com/mig-1g.10gb+me"),
        ("nvidia_com_vgpu", None),
    ],
)
def test_kube_state_metrics_resource_labels_map_back(label: str, name: str | None) -> None:
    assert resource_name(label) == name


def _pod(ns: str, pod: str, uid: str, **extra: str) -> dict[str, str]:
    return {"namespace": ns, "pod": pod, "uid": uid, **extra}


def answers() -> dict[str, Series]:
    a, b = _pod("research", "train-0", "u1"), _pod("research", "train-1", "u2")
    gone, cpu = _pod("research", "nb", "u3"), _pod("research", "web", "u4")
    return {
        "gpus": [
            ({**a, "resource": "nvidia_com_gpu", "container": "c"}, 4.0),
            ({**b, "resource": "nvidia_com_gpu", "container": "c"}, 4.0),
            ({**gone, "resource": "nvidia_com_mig_1g_10gb", "container": "c"}, 1.0),
            ({**cpu, "resource": "nvidia_com_vgpu", "container": "c"}, 1.0),
        ],
        "created": [(a, NOW - 1000.0), (b, NOW - 999.0), (gone, NOW - 900.0), (cpu, NOW - 5.0)],
        "scheduled": [(a, NOW - 990.0), (b, NOW - 980.0), (gone, NOW - 890.0)],
        "completed": [(a, NOW - 500.0), (b, NOW - 490.0)],
        "phase": [
            ({**a, "phase": "Succeeded"}, 1.0),
            ({**b, "phase": "Succeeded"}, 1.0),
            ({**gone, "phase": "Running"}, 1.0),
        ],
        "owner": [
            ({**a, "owner_kind": "Job", "owner_name": "train"}, 1.0),
            ({**b, "owner_kind": "Job", "owner_name": "train"}, 1.0),
        ],
        "info": [
            ({**a, "node": ""}, 1.0),
            ({**a, "node": "n1", "priority_class": "training"}, 1.0),
            ({**b, "node": "n2", "priority_class": "training"}, 1.0),
            ({**gone, "node": "n3"}, 1.0),
        ],
        "scheduler": [({**a, "name": "gpucarve"}, 1.0), ({**b, "name": "gpucarve"}, 1.0)],
        "seen": [(a, NOW - 400.0), (b, NOW - 400.0), (gone, NOW - 600.0)],
    }


def test_a_jobs_pods_are_one_workload_from_its_first_creation_to_its_last_end() -> None:
    out = rebuild(answers(), NOW)
    by = {x["name"]: x for x in out.lines}
    train = by["train"]
    assert train["submitTime"] == NOW - 1000 and train["priorityClass"] == "training"
    assert train["podSets"] == [
        {"name": "set-0", "count": 2, "resources": {"limits": {"nvidia.com/gpu": 4}}}
    ]
    want = {"starts": [NOW - 980], "endedAt": NOW - 490, "outcome": "Succeeded",
            "nodes": ["n1", "n2"], "scheduler": "gpucarve"}  # fmt: skip
    assert train["recorded"] == want
    assert train["duration"] == 490


def test_a_pod_gone_from_the_scrapes_before_it_ended_was_deleted_then() -> None:
    nb = next(x for x in rebuild(answers(), NOW).lines if x["name"] == "nb")
    assert nb["recorded"]["outcome"] == "Deleted" and nb["recorded"]["endedAt"] == NOW - 600
    assert nb["podSets"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": 1}
    # still scraped a moment ago: it runs
    fresh = answers()
    fresh["seen"] = [(labels, NOW - 5.0) for labels, _ in fresh["seen"]]
    nb = next(x for x in rebuild(fresh, NOW).lines if x["name"] == "nb")
    assert nb["recorded"]["outcome"] == "Running" and "endedAt" not in nb["recorded"]


def test_what_cannot_be_read_is_counted_by_why() -> None:
    a = answers()
    a["created"] = [x for x in a["created"] if x[0]["pod"] != "nb"]
    out = rebuild(a, NOW)
    assert out.unrecovered == {
        "a GPU resource gpucarve does not read (nvidia_com_vgpu)": 1,
        "no kube_pod_created sample": 1,
    }
    assert sorted(x["name"] for x in out.lines) == ["train"]
