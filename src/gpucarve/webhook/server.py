"""The admission webhook's HTTP side: AdmissionReview v1 in, a decision out (Starlette on
uvicorn, TLS). `/mutate` returns the pod's JSON patch; `/validate` allows or denies pods and
Queues with the scheduler's own checks (`admission`), and pod updates that would change what
the scheduler acts on (`bypass.owned_changes`). The serving certificate is read
again when its files change, into the same TLS context: new connections get the new one and
no request in flight is dropped.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio import to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gpucarve.core.policy import Policy
from gpucarve.core.problems import Problem, Severity
from gpucarve.webhook.admission import (
    claim_problems,
    cohort_problems,
    debug_problems,
    denial,
    job_problems,
    mutate,
    mutate_debug,
    pod_group_problems,
    pod_review,
    queue_problems,
    wants_gpu,
)
from gpucarve.webhook.bypass import device_config_problems, owned_changes

log = logging.getLogger("gpucarve.webhook")
MAX_REVIEW_BYTES = 3 * 1024 * 1024  # the API server's own limit on a request body
PARSED_AT_ONCE_BYTES = 64 * 1024  # about a millisecond of parsing (a pod is a few KiB)


MAX_UID = 128  # the API server's uids are 36 characters
# What the decision reads of an object; more nesting than this is no pod or Queue anyone
# writes, and would cost recursion (json, pydantic) a malformed body should never buy.
MAX_DEPTH = 64
# The errors a malformed object (one whose shape the checks did not expect) raises in them.
MALFORMED = (TypeError, AttributeError, KeyError, ValueError, IndexError, RecursionError)


class AsciiJSON(JSONResponse):
    """JSON escaped to ASCII: a lone surrogate in a name echoed into a message stays valid."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _review(
    uid: str,
    allowed: bool,
    message: str = "",
    patch: list[Any] | None = None,
    warnings: list[str] | None = None,
) -> Any:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if warnings:  # kubectl prints them ("Warning: …")
        response["warnings"] = warnings
    if not allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _depth(value: Any, limit: int) -> bool:
    """Whether `value` nests no deeper than `limit` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return False
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return True


def _parse(body: bytes) -> dict[str, Any] | str:
    """The review's request, or why it is not an AdmissionReview v1 this server reads."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return "not JSON"
    req = doc.get("request") if isinstance(doc, dict) else None
    if not isinstance(req, dict):
        return "no request"
    uid = req.get("uid")
    if not (isinstance(uid, str) and 0 < len(uid) <= MAX_UID and uid.isascii()
            and uid.isprintable()):  # fmt: skip
        return f"request.uid must be 1-{MAX_UID} printable ASCII characters"
    for key in ("kind", "object", "oldObject"):
        if req.get(key) is not None and not isinstance(req.get(key), dict):
            return f"request.{key} is not an object"
    if not isinstance((req.get("object") or {}).get("metadata") or {}, dict):
        return "request.object.metadata is not an object"
    if not _depth(req.get("object"), MAX_DEPTH) or not _depth(req.get("oldObject"), MAX_DEPTH):
        return f"request.object nests deeper than {MAX_DEPTH} levels"
    return req


# Reviews worked out at once (parsing and deciding, in worker threads): more only queue for
# the interpreter's lock, and the event loop answering /healthz and taking new reviews then
# waits behind all of them (40 large reviews held /healthz 10-16 s with the default pool).
DECISIONS_AT_ONCE = 2
# Worker threads that may wait for a turn: a review past its deadline leaves its thread,
# which gives up at its turn (so the bound on decisions holds).
WAITING_THREADS = 16
# The default deadline of a review, inside the hooks' own timeout (the chart's: 5 s), so the
# API server hears gpucarve's answer rather than its own timeout's.
REVIEW_DEADLINE_S = 4.0


class Overrun:
    """A review not decided by its deadline."""


OVERRUN = Overrun()


class Workers:
    """The server's worker threads for its decisions, `DECISIONS_AT_ONCE` at most, each review
    decided by `deadline_s` from its arrival or answered as overrun (the limiter is made in
    the event loop that uses it)."""

    def __init__(self, deadline_s: float = REVIEW_DEADLINE_S) -> None:
        self.deadline_s = deadline_s
        self._threads: anyio.CapacityLimiter | None = None
        self._turns = threading.BoundedSemaphore(DECISIONS_AT_ONCE)
        self.most = 0  # the most decisions seen at once (tests read it)
        self._now = 0
        self._count = threading.Lock()

    def by(self) -> float:
        """The deadline of a review arriving now, on the event loop's clock."""
        return anyio.current_time() + self.deadline_s

    async def run(self, by: float, fn: Callable[..., Any], *args: Any) -> Any:
        if self._threads is None:
            self._threads = anyio.CapacityLimiter(WAITING_THREADS)
        gave_up = threading.Event()
        with anyio.move_on_after(by - anyio.current_time()):
            return await to_thread.run_sync(
                self._counted, gave_up, fn, *args, abandon_on_cancel=True, limiter=self._threads
            )
        gave_up.set()
        return OVERRUN

    def _counted(self, gave_up: threading.Event, fn: Callable[..., Any], *args: Any) -> Any:
        with self._turns:
            if gave_up.is_set():
                return OVERRUN  # answered already: the turn goes to the next
            with self._count:
                self._now += 1
                self.most = max(self.most, self._now)
            try:
                return fn(*args)
            finally:
                with self._count:
                    self._now -= 1


async def _read(request: Request, work: Workers, by: float) -> dict[str, Any] | Response:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_REVIEW_BYTES:
            return Response("review too large", status_code=413)
    # a large body is parsed off the event loop (it must not hold up /healthz or other
    # reviews); a small one at once, so that even a review waiting for its turn has a uid
    # to be answered with at its deadline
    req: dict[str, Any] | str | Overrun = (
        _parse(body) if len(body) <= PARSED_AT_ONCE_BYTES else await work.run(by, _parse, body)
    )
    if isinstance(req, Overrun):
        # no uid to answer with: the API server applies the hook's failure policy
        return Response("review not read by its deadline", status_code=503)
    if isinstance(req, str):
        return Response(f"not an AdmissionReview v1 this server reads: {req}", 400)
    return req


def _pod_update(req: dict[str, Any]) -> list[Problem]:
    # only a change to what the scheduler acts on is refused (webhook/bypass.py)
    old = req.get("oldObject")
    return owned_changes(old, req.get("object") or {}) if isinstance(old, dict) else []


@dataclass(frozen=True)
class Settings:
    """What the server is told at start: the schedulerName it gives GPU pods, and the users
    besides the control plane that may write device ConfigMaps (the scheduler's)."""

    scheduler_name: str = "gpucarve"
    writers: frozenset[str] = frozenset()
    # the hooks' failure policies (chart values), applied to a review past its deadline
    fail_closed: bool = True
    other_pods_fail_closed: bool = False


def _problems(policy: Policy, req: dict[str, Any], settings: Settings) -> list[Problem]:
    """What /validate refuses in this request (nothing for what it does not review)."""
    obj = req.get("object") or {}
    kind = (req.get("kind") or {}).get("kind")
    op, sub = req.get("operation"), req.get("subResource")
    scheduler_name = settings.scheduler_name
    if kind == "ConfigMap":
        # sent only for gpucarve's device ConfigMaps (the hook's objectSelector)
        return device_config_problems(req, settings.writers)
    if kind == "Pod" and op == "CREATE":
        obj.setdefault("metadata", {}).setdefault("namespace", req.get("namespace"))
        return pod_review(policy, obj, scheduler_name)
    if kind == "Pod" and op == "UPDATE" and not sub:
        return _pod_update(req)
    if kind == "Pod" and sub == "ephemeralcontainers":
        # `kubectl debug` adds containers to a running pod: the same rules hold
        obj.setdefault("metadata", {}).setdefault("namespace", req.get("namespace"))
        return debug_problems(policy, obj, req.get("oldObject") or {})
    if kind == "Queue" and op in ("CREATE", "UPDATE"):
        return queue_problems(policy, obj)
    if kind == "Cohort" and op in ("CREATE", "UPDATE"):
        return cohort_problems(policy, obj)
    if kind in ("ResourceClaim", "ResourceClaimTemplate") and op == "CREATE":
        # a claim's spec cannot change after creation; updates (the scheduler's own finalizer
        # patch among them) are never reviewed
        obj.setdefault("metadata", {}).setdefault("namespace", req.get("namespace"))
        return claim_problems(policy, obj, template=kind == "ResourceClaimTemplate")
    if kind == "Job" and op == "CREATE":
        obj.setdefault("metadata", {}).setdefault("namespace", req.get("namespace"))
        return job_problems(policy, obj)
    if kind == "PodGroup" and op in ("CREATE", "UPDATE"):
        obj.setdefault("metadata", {}).setdefault("namespace", req.get("namespace"))
        return pod_group_problems(policy, obj)
    return []


def _validate(policy: Policy, req: dict[str, Any], settings: Settings) -> Any:
    try:
        problems = _problems(policy, req, settings)
    except MALFORMED as exc:
        # an object of a shape the checks do not know: refused (fail closed), never a 500
        log.warning("review %s: malformed object refused: %s", req["uid"], exc)
        return _review(req["uid"], False, f"gpucarve: the object is malformed ({exc!r:.200})")
    errors = [p for p in problems if p.severity is Severity.ERROR]
    if errors:
        return _review(req["uid"], False, denial(errors))
    warnings = [f"gpucarve: {p.location}: {p.message} (fix: {p.fix})" for p in problems]
    return _review(req["uid"], True, warnings=warnings)


def overrun(req: dict[str, Any], settings: Settings, deadline_s: float) -> Any:
    """The answer to a review not decided by its deadline: what the API server would do at
    the hook's timeout under its failure policy, said by gpucarve with the reason and fix."""
    obj = req.get("object") or {}
    kind = (req.get("kind") or {}).get("kind")
    other_pod = kind == "Pod" and not (
        wants_gpu(obj) or ((obj.get("spec") or {}).get("resourceClaims") if
                           isinstance(obj, dict) else None))  # fmt: skip
    closed = settings.other_pods_fail_closed if other_pod else settings.fail_closed
    why = (f"gpucarve did not decide this {kind or 'object'} within {deadline_s:g} s (the "
           "webhook is busy, or the object is costly to check)")  # fmt: skip
    log.warning("review %s: %s; %s", req["uid"], why, "refused" if closed else "admitted")
    if closed:
        return _review(req["uid"], False, f"{why}; fix: try again; if it persists, simplify "
                       "the object's selectors or add webhook replicas")  # fmt: skip
    return _review(req["uid"], True, warnings=[f"{why}: admitted unchecked, as the hook's "
                                               "failurePolicy Ignore says"])  # fmt: skip


def _mutate(policy: Policy, req: dict[str, Any], scheduler_name: str) -> Any:
    obj = req.get("object") or {}
    if (req.get("kind") or {}).get("kind") != "Pod":
        return _review(req["uid"], True)
    debug = req.get("subResource") == "ephemeralcontainers"
    if not debug and req.get("operation") != "CREATE":
        return _review(req["uid"], True)
    try:
        obj.setdefault("metadata", {}).setdefault("namespace", req.get("namespace"))
        if debug:
            m = mutate_debug(policy, obj, req.get("oldObject") or {})
        else:
            m = mutate(policy, obj, scheduler_name, req["uid"])
    except MALFORMED as exc:
        # no patch; /validate refuses what it cannot read
        log.warning("review %s: malformed pod left unchanged: %s", req["uid"], exc)
        return _review(req["uid"], True)
    if m.changes:
        log.info("pod %s/%s: %s", req.get("namespace"), obj["metadata"].get("name") or
                 obj["metadata"].get("generateName"), "; ".join(m.changes))  # fmt: skip
    return _review(req["uid"], True, patch=m.patch)


def app(
    policy: Callable[[], Policy],
    settings: Settings,
    work: Workers | None = None,
) -> Starlette:
    """`policy` gives the current one (the server follows the same file as the scheduler).
    Each decision runs in a worker thread, `DECISIONS_AT_ONCE` at most, so the event loop
    keeps answering `/healthz` and taking reviews while large ones are worked out; a review
    not decided by its deadline is answered as its hook's failure policy says."""
    workers = work or Workers()

    async def review(request: Request, decide: Callable[..., Any], *args: Any) -> Response:
        by = workers.by()
        req = await _read(request, workers, by)
        if isinstance(req, Response):
            return req
        answer = await workers.run(by, decide, policy(), req, *args)
        if isinstance(answer, Overrun):
            answer = overrun(req, settings, workers.deadline_s)
        return AsciiJSON(answer)

    async def do_mutate(request: Request) -> Response:
        return await review(request, _mutate, settings.scheduler_name)

    async def do_validate(request: Request) -> Response:
        return await review(request, _validate, settings)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/mutate", do_mutate, methods=["POST"]),
            Route("/validate", do_validate, methods=["POST"]),
            Route("/healthz", healthz),
        ]
    )


class CertReloader:
    """One TLS context whose certificate is loaded again when the files change."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._seen: tuple[float, float] | None = None
        self.reloads = 0
        self.reload()

    def _stamp(self) -> tuple[float, float]:
        return (os.stat(self.cert).st_mtime, os.stat(self.key).st_mtime)

    def reload(self) -> bool:
        try:
            stamp = self._stamp()
            if stamp == self._seen:
                return False
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            if self._seen is None:
                raise
            log.warning("serving certificate not reloaded (the old one stays): %s", exc)
            return False
        self._seen = stamp
        self.reloads += 1
        return True

    def follow(self, stop: threading.Event, every_s: float = 1.0) -> threading.Thread:
        def loop() -> None:
            while not stop.wait(every_s):
                if self.reload():
                    log.info("serving certificate reloaded from %s", self.cert)

        t = threading.Thread(target=loop, name="cert reload", daemon=True)
        t.start()
        return t
