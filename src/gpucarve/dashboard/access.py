"""Who may see what on the dashboard, decided by the Kubernetes API server itself.

A request carries a bearer token (the user's own: `kubectl create token`, an OIDC id token the
API server accepts). A TokenReview says whose it is; SubjectAccessReviews say what that user
may do: `list nodes` (cluster scope) opens the cluster-wide pages (pools, queues, idle,
changes), and `list pods` in a namespace shows that namespace's workloads by name. Nothing is
granted that the API server would not grant through kubectl. Answers are kept per token for
`ttl_s` (bounded), so a page's requests cost one review, and a revoked grant ends within it.

`Open` lets every request see everything: for `kubectl port-forward`, where reaching the port
already took the right to port-forward into the scheduler's namespace.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gpucarve.dashboard.model import EVERYONE, Viewer
from gpucarve.kube.api.client import ApiError, Client

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
CACHED = 1024  # tokens remembered at most


class Denied(Exception):
    """The request may not see the dashboard: `status` 401 (who?) or 503 (cannot ask)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Access(Protocol):
    def viewer(self, authorization: str | None) -> Viewer: ...


class Open:
    def viewer(self, authorization: str | None) -> Viewer:
        return EVERYONE


class KubeAccess:
    def __init__(
        self,
        client: Client,
        namespaces: Callable[[], Iterable[str]],
        ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.namespaces = namespaces  # the governed namespaces (the policy's, as it is now)
        self.ttl_s = ttl_s
        self.clock = clock
        self._cache: OrderedDict[str, tuple[float, Viewer]] = OrderedDict()
        self._lock = threading.Lock()

    def viewer(self, authorization: str | None) -> Viewer:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Denied(401, "sign in with a bearer token the API server accepts")
        key = hashlib.sha256(token.strip().encode()).hexdigest()
        now = self.clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
        v = self._review(token.strip())
        with self._lock:
            self._cache[key] = (now, v)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHED:
                self._cache.popitem(last=False)
        return v

    def _review(self, token: str) -> Viewer:
        try:
            got = self.client.call(
                "POST",
                TOKEN_REVIEWS,
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                 "spec": {"token": token}},
            )  # fmt: skip
        except ApiError as err:
            raise Denied(503, f"the API server could not review the token: {err}") from None
        status = (got or {}).get("status") or {}
        if not status.get("authenticated"):
            raise Denied(401, "the API server does not accept this token")
        user = status.get("user") or {}
        cluster = self._may(user, "nodes", None)
        seen = frozenset(ns for ns in sorted(set(self.namespaces())) if self._may(user, "pods", ns))
        return Viewer(str(user.get("username", "?")), cluster, seen)

    def _may(self, user: dict[str, Any], resource: str, namespace: str | None) -> bool:
        attrs: dict[str, Any] = {"verb": "list", "resource": resource, "group": ""}
        if namespace is not None:
            attrs["namespace"] = namespace
        spec: dict[str, Any] = {
            "user": user.get("username", ""),
            "groups": user.get("groups") or [],
            "uid": user.get("uid", ""),
            "resourceAttributes": attrs,
        }
        if user.get("extra"):
            spec["extra"] = user["extra"]
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        try:
            got = self.client.call("POST", ACCESS_REVIEWS, body)
        except ApiError as err:
            raise Denied(503, f"the API server could not review access: {err}") from None
        return bool(((got or {}).get("status") or {}).get("allowed"))
