"""The scheduler's own pod says whether it leads (`gpucarve.io/leader: "true"`), so that a
Service selecting that label (the dashboard's) reaches the replica that decides, never a
standby with no cycle to show. Set "false" before the Lease is sought (a container restarted
in a pod that led keeps the pod's labels), "true" once it is held, "false" on a clean exit.
Best effort: a refused patch is logged and scheduling goes on."""

from __future__ import annotations

import logging

from gpucarve.core.vocabulary import LEADER_LABEL
from gpucarve.kube.api.client import ApiError, Client

log = logging.getLogger("gpucarve.scheduler")


def mark(client: Client, pod: str, leading: bool) -> bool:
    """Label `pod` (NAMESPACE/NAME); whether the API server took it."""
    namespace, _, name = pod.partition("/")
    body = {"metadata": {"labels": {LEADER_LABEL: "true" if leading else "false"}}}
    try:
        client.call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            body,
            "application/merge-patch+json",
        )
    except ApiError as err:
        log.warning("pod %s not labelled %s=%s: %s", pod, LEADER_LABEL, leading, err)
        return False
    return True
