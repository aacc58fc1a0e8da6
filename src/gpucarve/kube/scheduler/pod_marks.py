"""A pod annotation the scheduler keeps (an idle mark, a fraction's share): written with a
merge patch where it changed; a pod gone meanwhile is nothing to mark, any other refusal is
logged and the next cycle tries again."""

from __future__ import annotations

import logging

from gpucarve.kube.api.client import ApiError, Client

log = logging.getLogger(__name__)


def mark_pod(client: Client, pod: str, key: str, value: str | None, what: str) -> None:
    """Set (None: remove) annotation `key` of `pod` (namespace/name); `what` names it in the
    log."""
    ns, _, name = pod.partition("/")
    patch = {"metadata": {"annotations": {key: value}}}
    try:
        client.call(
            "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", patch, "application/merge-patch+json"
        )
    except ApiError as err:
        if err.status != 404:
            log.warning("pod %s: %s not written: %s", pod, what, err)
