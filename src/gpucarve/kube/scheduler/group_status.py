"""What the scheduler writes into each gpucarve PodGroup's status after a cycle, so that
`kubectl get podgroups` answers "is my gang placed, and if not why":

- `phase`: Pending (fewer than minMember pods bound), Scheduled (minMember bound), Running
  (minMember running), Finished (minMember succeeded and none left running), Failed (so many
  pods failed that minMember can no longer be met);
- `scheduled`, `running`: pods bound and running;
- `reason`: why its waiting pods wait (the scheduler's pending reason, as on the pods), or why
  the gang was released (its timeout);
- `conditions`: `Scheduled` (True once minMember are bound; False with reason Unschedulable or
  GangTimeout and the message);
- `reservation`, while the gang waits holding one (`scheduling.reserveAfterSeconds`): the
  nodes kept for it, when it is expected to fit and the running work that must end first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpucarve.core.vocabulary import TERMINAL_PHASES


def group_status(
    min_member: int,
    members: Sequence[Mapping[str, Any]],
    bound: frozenset[str],
    reason: str | None,
    timed_out: str | None,
    reservation: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`members`: the group's pods; `bound`: those the scheduler has bound that the watch does
    not show bound yet; `reason`: a waiting pod's message; `timed_out`: the release message
    while the gang has not been placed whole again; `reservation`: the one it holds (nodes,
    expectedStart, waitsFor). No condition timestamps: the writer adds them."""
    phases = [(p.get("status") or {}).get("phase") for p in members]
    succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
    # A pod being deleted (a released gang's, say) no longer holds its place in the gang.
    live = [
        (p, phase)
        for p, phase in zip(members, phases, strict=True)
        if phase not in TERMINAL_PHASES and not p["metadata"].get("deletionTimestamp")
    ]
    running = sum(1 for _, phase in live if phase == "Running")
    scheduled = sum(1 for p, _ in live if (p.get("spec") or {}).get("nodeName") or _key(p) in bound)
    if succeeded >= min_member and running == 0:
        phase = "Finished"
    elif len(members) - failed < min_member and failed:
        phase = "Failed"
    elif running >= min_member:
        phase = "Running"
    elif scheduled + succeeded >= min_member and scheduled >= 1:  # running pods are scheduled
        phase = "Scheduled"
    else:
        phase = "Pending"
    whole = phase in ("Scheduled", "Running", "Finished")
    if whole:
        cond = {"type": "Scheduled", "status": "True", "reason": "Scheduled", "message": ""}
        shown = ""
    elif timed_out is not None:
        cond = {"type": "Scheduled", "status": "False", "reason": "GangTimeout"}
        cond["message"] = shown = timed_out
    else:
        shown = reason or _short(min_member, len(members))
        cond = {"type": "Scheduled", "status": "False", "reason": "Unschedulable"}
        cond["message"] = shown
    out: dict[str, Any] = {
        "phase": phase,
        "scheduled": scheduled,
        "running": running,
        "reason": shown[:1024],
        "conditions": [cond],
    }
    if reservation is not None and not whole:
        out["reservation"] = dict(reservation)
    return out


def _short(min_member: int, have: int) -> str:
    if have < min_member:
        return f"gang/min-member: {have} of its {min_member} pods exist; waiting for the rest"
    return ""


def _key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"


def upstream_condition(
    min_count: int,
    members: Sequence[Mapping[str, Any]],
    bound: frozenset[str],
    reason: str | None,
    current: Sequence[Mapping[str, Any]],
) -> dict[str, Any] | None:
    """The `PodGroupInitiallyScheduled` condition for a PodGroup of Kubernetes' Workload API
    (`scheduling.k8s.io`), as kube-scheduler keeps it: True once `min_count` of its pods have
    been bound, and then never False again (terminal); until then False with reason
    Unschedulable and why its pods wait. None: nothing to write (already True). `current`:
    the conditions the object has now. No timestamp: the writer adds it."""
    if any(c.get("type") == INITIALLY_SCHEDULED and c.get("status") == "True" for c in current):
        return None
    status = group_status(min_count, members, bound, reason, None)
    if status["conditions"][0]["status"] == "True":
        return {"type": INITIALLY_SCHEDULED, "status": "True", "reason": "Scheduled",
                "message": f"{status['scheduled']} of its pods bound"}  # fmt: skip
    return {"type": INITIALLY_SCHEDULED, "status": "False", "reason": "Unschedulable",
            "message": status["reason"][:1024] or "waiting for its pods"}  # fmt: skip
