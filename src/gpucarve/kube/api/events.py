"""Events gpucarve writes on the objects it acts on (core/v1 Events: `kubectl describe` shows
them). Best effort: a lost Event costs a message, never a decision."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from gpucarve.kube.api.client import ApiError, Client, rfc3339

log = logging.getLogger("gpucarve.events")
COMPONENT = "gpucarve-scheduler"


def post_event(
    client: Client,
    involved: dict[str, str],
    kind: str,
    reason: str,
    message: str,
    now: datetime,
) -> None:
    """`involved`: apiVersion, kind, name and (for namespaced objects) namespace; the Event
    goes to that namespace, or `default` for cluster-scoped objects."""
    ns = involved.get("namespace", "default")
    stamp = rfc3339(now)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": ns},
        "involvedObject": involved,
        "type": kind,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        client.call("POST", f"/api/v1/namespaces/{ns}/events", body)
    except ApiError as err:
        log.debug("event for %s %s not written: %s", involved["kind"], involved["name"], err)
